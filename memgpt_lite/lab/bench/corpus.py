"""Synthetic text for the benchmarks and the retrieval eval, deterministic for a seeded rng.

* `synthetic_messages` / `synthetic_queries`: the mixed-language corpus of `bench store` and
  the retrieval eval's filler (English, with one Chinese line in ten).
* `corpus_messages` / `corpus_passage` / `corpus_queries` / `corpus_text`: the single-language
  corpora (English or Chinese) the store and engine sections of the suite grow and search.
"""

from __future__ import annotations

import random
import time

from memgpt_lite.engine.records import Message

NAMES = ["Ann", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas",
         "Kemi", "Liam", "Mei", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq"]
PLACES = ["the office", "Berlin", "the gym", "my parents' house", "the library", "Toronto",
          "the cafe on Main Street", "the airport", "the park", "the clinic", "Madrid",
          "the supermarket", "school", "the coworking space", "the beach"]
NOUNS = ["report", "budget", "presentation", "garden", "bike", "laptop", "recipe", "invoice",
         "playlist", "database", "migration", "newsletter", "spreadsheet", "car", "apartment",
         "tax return", "podcast", "camera", "sofa", "website", "meeting notes", "contract",
         "vacation photos", "running shoes", "router", "printer", "guitar", "novel", "lesson plan",
         "quarterly review", "shopping list", "train tickets", "dentist appointment", "deploy script"]
VERBS = ["finished", "started", "forgot about", "reviewed", "fixed", "cancelled", "moved",
         "rewrote", "shared", "printed", "ordered", "returned", "cleaned", "updated", "lost"]
ADJS = ["new", "old", "broken", "shared", "monthly", "quick", "long", "expensive", "cheap",
        "second", "final", "messy", "weekly", "urgent", "small"]
TIMES = ["yesterday", "this morning", "last week", "on Friday", "tonight", "after lunch",
         "two days ago", "next Tuesday", "over the weekend", "before the holidays"]
TECH = ["Python decorators", "SQLite indexes", "Docker volumes", "CSS grid", "git rebase",
        "OAuth tokens", "unit tests", "async functions", "regular expressions", "cron jobs"]
TEMPLATES = [
    "I {verb} the {adj} {noun} {time}.",
    "{name} and I {verb} the {noun} at {place} {time}.",
    "Can you help me with the {noun}? I {verb} it {time} and it still looks {adj}.",
    "Remind me to call {name} about the {noun} {time}.",
    "Honestly the {adj} {noun} is driving me crazy.",
    "Do you think I should bring the {noun} to {place}?",
    "{name} said the {noun} from {place} was too {adj}.",
    "Can you explain how {tech} work? I keep getting confused.",
    "What should I cook tonight? I have rice, eggs and some spinach.",
    "My friend {name} lives near {place} and has a dog that barks all night.",
    "I need to name the {noun} something better than {adj} {noun}.",
    "Traffic to {place} was terrible {time}, it took an hour.",
    "I'm thinking of learning more about {tech} {time}.",
    "The weather at {place} was lovely {time}.",
    "Let's plan the {noun} for {time}, {name} can join too.",
    "My brother keeps asking me about the {noun}.",
    "I had coffee with {name} at {place} {time}.",
    "Can we play some music while I work on the {noun}?",
    "I take the train to {place} most days.",
    "What's a good way to organise the {adj} {noun}?",
]
REPLIES = [
    "Sure, here is a short plan for the {noun}: start small and check it {time}.",
    "That sounds frustrating. Maybe ask {name} to look at the {noun} with you.",
    "Good idea. I'd keep the {noun} somewhere safe until {time}.",
    "Here's how {tech} work, step by step, with one small example.",
    "Got it. I'll keep that in mind.",
    "You could try a simpler version of the {noun} first.",
    "Happy to help with the {noun}. What have you tried so far?",
]
EN_QUERIES = ["what did I say about the {noun}", "{name} {noun}", "when did I {verb} the {noun}?",
              "{adj} {noun} at {place}", "how do {tech} work", "{noun}",
              "the {noun} {name} mentioned {time}", "did we talk about {place}?"]
# The mixed-language set of `bench store` and retrieval_eval: English with one Chinese line in
# ten, drawn from the first words of the Chinese corpus below.
ZH = ["我今天在{p}处理{n}，有点累。", "明天要和同事讨论{n}的问题。", "周末打算去{p}散步，顺便买点东西。",
      "这个{n}比我想象的复杂多了。", "你能帮我整理一下{n}吗？", "昨天晚上看了一部很好看的电影。"]
MIXED_QUERIES = [*EN_QUERIES[:6], "数据库的问题", *EN_QUERIES[6:]]


def _fill(rng: random.Random, template: str) -> str:
    noun = rng.choice(NOUNS)  # drawn first: keeps the corpora identical to earlier runs
    return template.format(verb=rng.choice(VERBS), adj=rng.choice(ADJS), noun=noun,
                           time=rng.choice(TIMES), name=rng.choice(NAMES),
                           place=rng.choice(PLACES), tech=rng.choice(TECH))


def synthetic_text(rng: random.Random, role: str) -> str:
    if rng.random() < 0.1:
        return "".join(rng.choice(ZH).format(n=rng.choice(ZH_NOUNS[:10]),
                                             p=rng.choice(ZH_PLACES[:6]))
                       for _ in range(rng.randint(1, 2)))
    return corpus_text(rng, "en", role)


def synthetic_messages(rng: random.Random, n: int, start_turn: int = 1) -> list[Message]:
    out = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        day = 1 + (i * 365) // max(n, 1)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1735689600 + day * 86400 + i % 86400))
        out.append(Message(role, [{"type": "text", "text": synthetic_text(rng, role)}],
                           start_turn + i // 2, created_at=at, in_context=False))
    return out


def synthetic_queries(rng: random.Random, n: int) -> list[str]:
    return [_fill(rng, rng.choice(MIXED_QUERIES)) for _ in range(n)]


ZH_NAMES = ["张伟", "李娜", "王芳", "刘洋", "陈静", "杨帆", "赵磊", "黄敏", "周杰", "吴婷", "徐明",
            "孙丽", "马超", "朱琳", "胡军", "郭佳"]
ZH_PLACES = ["公司", "公园", "图书馆", "超市", "咖啡店", "学校", "医院", "机场", "火车站", "健身房",
             "北京", "上海", "杭州", "成都", "深圳", "广州", "老家", "办公室"]
ZH_NOUNS = ["报告", "预算", "数据库", "网站", "合同", "照片", "账单", "代码", "计划", "课程", "简历",
            "电脑", "自行车", "菜谱", "发票", "会议纪要", "旅行计划", "房租", "护照", "论文", "手机",
            "快递", "生日礼物", "年终总结", "服务器", "部署脚本", "演示文稿", "体检报告"]
ZH_VERBS = ["完成了", "开始写", "忘记了", "检查了", "修好了", "取消了", "改了", "分享了", "打印了",
            "订了", "退了", "整理了", "更新了", "弄丢了", "讨论了"]
ZH_TIMES = ["昨天", "今天早上", "上周", "周五", "今晚", "午饭后", "前天", "下周二", "周末", "节假日前"]
ZH_TEMPLATES = [
    "我{t}{v}{n}。", "{name}和我{t}在{p}{v}{n}。", "你能帮我看看{n}吗？我{t}{v}，还是有问题。",
    "提醒我{t}给{name}打电话说{n}的事。", "这个{n}真让人头疼。", "你觉得我应该把{n}带到{p}吗？",
    "{name}说{p}的{n}太贵了。", "我{t}在{p}和{name}喝咖啡。", "去{p}的路上堵车堵了一个小时。",
    "{t}{p}的天气特别好。", "我们{t}一起准备{n}吧，{name}也可以来。", "我哥哥一直在问{n}的事情。",
    "我想{t}多学一点关于{n}的东西。", "{name}住在{p}附近，养了一只很吵的狗。",
]
ZH_REPLIES = ["好的，关于{n}，我建议先从小处开始，{t}再检查一遍。", "听起来很麻烦，也许可以请{name}帮忙看看{n}。",
              "明白了，我会记住的。", "可以先试试一个简单一点的{n}。", "没问题，{n}你已经试过哪些办法了？"]
ZH_QUERIES = ["{n}", "{name}的{n}", "我什么时候{v}{n}", "{p}的{n}", "{t}在{p}", "和{name}聊过{n}吗",
              "{name}说了什么", "关于{n}的问题", "{p}"]
PASSAGES_EN = ["{name}'s {noun} is kept at {place}.", "The user {verb} the {adj} {noun} {time}.",
               "{name} prefers the {adj} {noun}; ask before changing it.",
               "Note on {tech}: the user found them confusing {time}.",
               "Plan: bring the {noun} to {place} {time} with {name}."]
PASSAGES_ZH = ["{name}的{n}放在{p}。", "用户{t}{v}{n}。", "{name}更喜欢{p}的{n}，改之前先问一下。",
               "计划：{t}和{name}一起把{n}带到{p}。"]


def _fill_zh(rng: random.Random, template: str) -> str:
    return template.format(name=rng.choice(ZH_NAMES), p=rng.choice(ZH_PLACES),
                           n=rng.choice(ZH_NOUNS), v=rng.choice(ZH_VERBS), t=rng.choice(ZH_TIMES))


def corpus_text(rng: random.Random, lang: str, role: str) -> str:
    """One message of the single-language corpora the store section searches."""
    if lang == "zh":
        pool = ZH_TEMPLATES if role == "user" else ZH_REPLIES + ZH_TEMPLATES[:4]
        return "".join(_fill_zh(rng, rng.choice(pool)) for _ in range(rng.randint(1, 3)))
    pool = TEMPLATES if role == "user" else REPLIES + TEMPLATES[:6]
    return " ".join(_fill(rng, rng.choice(pool)) for _ in range(rng.randint(1, 3)))


def corpus_messages(rng: random.Random, lang: str, start: int, n: int) -> list[Message]:
    """Messages start .. start+n-1 of a corpus: alternating user/assistant, two per turn,
    about 3 minutes apart (1M messages span about 6 years)."""
    out = []
    for i in range(start, start + n):
        role = "user" if i % 2 == 0 else "assistant"
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1577836800 + i * 180))
        out.append(Message(role, [{"type": "text", "text": corpus_text(rng, lang, role)}],
                           1 + i // 2, created_at=at, in_context=False))
    return out


def corpus_passage(rng: random.Random, lang: str) -> str:
    if lang == "zh":
        return "".join(_fill_zh(rng, rng.choice(PASSAGES_ZH)) for _ in range(rng.randint(1, 2)))
    return " ".join(_fill(rng, rng.choice(PASSAGES_EN)) for _ in range(rng.randint(1, 2)))


def corpus_queries(rng: random.Random, lang: str, n: int) -> list[str]:
    if lang == "zh":
        return [_fill_zh(rng, rng.choice(ZH_QUERIES)) for _ in range(n)]
    return [_fill(rng, rng.choice(EN_QUERIES)) for _ in range(n)]
