"""The config file as users keep it: two `config set` at once both land; a file from a
Windows editor (a byte order mark, CRLF) reads and keeps its line ends; bytes that are not
UTF-8 are never written back as U+FFFD; a folder in the file's place is named, also by unset;
a key written 'quoted' is the key it names."""

from __future__ import annotations

import threading
import tomllib

import pytest

from memgpt_lite.engine import config, config_file
from memgpt_lite.engine.setting_rules import ConfigError


def path():
    return config_file.config_path()


def test_two_writers_at_once_both_land(monkeypatch):
    """The first writer is held after it read the file: the second must wait for it, else
    each writes back what it read and one key is lost."""
    real_replace, reached, go = config_file._replace, threading.Event(), threading.Event()
    held = []

    def slow_replace(target, text):
        if not held:  # only the first writer is held
            held.append(1)
            reached.set()
            assert go.wait(10)
        real_replace(target, text)

    monkeypatch.setattr(config_file, "_replace", slow_replace)
    first = threading.Thread(target=config_file.set_value, args=("model", "haiku"))
    first.start()
    assert reached.wait(10)
    second = threading.Thread(target=config_file.set_value, args=("context_window", "16000"))
    second.start()
    second.join(0.5)  # without the lock it writes now, from the file as it was
    go.set()
    first.join(10)
    second.join(10)
    data = tomllib.loads(path().read_text())
    assert (data.get("model"), data.get("context_window")) == ("claude-haiku-5-5", 16000)


def test_a_file_from_a_windows_editor_reads_and_keeps_its_line_ends():
    path().parent.mkdir(parents=True)
    path().write_bytes(b'\xef\xbb\xbf# mine\r\nmodel = "haiku"\r\n')
    assert config_file.load().values == {"model": "claude-haiku-5-5"}
    config_file.set_value("context_window", "16000")
    assert config_file.unset("model")
    assert path().read_bytes() == b"# mine\r\ncontext_window = 16000\r\n"


def test_bytes_that_are_not_utf8_are_read_but_never_rewritten():
    path().parent.mkdir(parents=True)
    original = b'model = "haiku"\n# caf\xe9 au lait\n'
    path().write_bytes(original)
    assert config_file.load().values == {"model": "claude-haiku-5-5"}  # read as U+FFFD
    for change in (lambda: config_file.set_value("context_window", "16000"),
                   lambda: config_file.unset("model")):
        with pytest.raises(ConfigError, match=r"holds bytes that are not UTF-8 \(line 2\); "
                                              "fix them by hand, nothing was changed"):
            change()
    assert path().read_bytes() == original


def test_a_folder_in_place_of_the_file_is_named_by_set_and_unset():
    path().mkdir(parents=True)
    for change in (lambda: config_file.set_value("model", "haiku"),
                   lambda: config_file.unset("model")):  # not "model is not set"
        with pytest.raises(ConfigError, match="is a folder; point MEMGPT_LITE_CONFIG"):
            change()


def test_a_quoted_key_is_the_key_it_names():
    path().parent.mkdir(parents=True)
    path().write_text("'model' = \"opus\"\n\"context_window\" = 9000\n")
    config_file.set_value("model", "haiku")
    config_file.set_value("context_window", "16000")
    assert tomllib.loads(path().read_text()) == {"model": "claude-haiku-5-5",
                                                  "context_window": 16000}
    assert config_file.unset("model")
    assert tomllib.loads(path().read_text()) == {"context_window": 16000}


def test_a_bad_price_table_from_the_file_is_named_as_the_file_has_it(monkeypatch, tmp_path):
    """The user never typed MEMGPT_LITE_PRICES: the sentence names the file's key."""
    from memgpt_lite.engine import tokens

    missing = tmp_path / "missing.json"
    path().parent.mkdir(parents=True)  # by hand: `config set` refuses a file that is not there
    path().write_text(f"prices = {config_file.toml_value(str(missing))}\n")
    with pytest.raises(ConfigError) as caught:
        tokens.price_table()
    assert str(caught.value).startswith(f"prices = {missing} in {path()} is not a readable")
    monkeypatch.setenv("MEMGPT_LITE_PRICES", str(missing))  # the environment comes first
    with pytest.raises(ConfigError, match=f"^MEMGPT_LITE_PRICES={missing} is not a readable"):
        tokens.price_table()


def test_a_file_that_does_not_parse_is_named_by_set_with_its_own_line():
    """Not the line of the file as the edit would have left it, which the user never saw."""
    path().parent.mkdir(parents=True)
    path().write_text("# mine\nfoo = [\n")
    with pytest.raises(ConfigError) as loading:
        config_file.load()
    with pytest.raises(ConfigError) as setting:
        config_file.set_value("context_window", "16000")
    assert str(setting.value) == str(loading.value)
    path().write_text("# mine\nmodel = [\n")  # the broken line is the one set replaces
    config_file.set_value("model", "haiku")
    assert config_file.load().values == {"model": "claude-haiku-5-5"}


def test_a_pipe_in_place_of_the_file_is_read_but_never_written(tmp_path, monkeypatch):
    """MEMGPT_LITE_CONFIG=<(...) or /dev/null is read as a file; set and unset refuse it at
    once (they read it first, which waited for a writer, and a change would be lost)."""
    import os

    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    monkeypatch.setenv("MEMGPT_LITE_CONFIG", str(fifo))
    errors = []

    def change():
        for call in (lambda: config_file.set_value("model", "haiku"),
                     lambda: config_file.unset("model")):
            try:
                call()
            except ConfigError as exc:
                errors.append(str(exc))

    worker = threading.Thread(target=change, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # blocked reading the pipe: let it go, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
    assert len(errors) == 2 and all("is not a regular file" in e for e in errors), errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.toml"]  # no lock file beside


def test_unset_with_no_file_makes_nothing():
    assert config_file.unset("model") is False
    assert not path().parent.exists()  # no config folder, no lock file, for nothing


def test_an_array_over_several_lines_is_not_taken_for_a_table():
    """`  [1, 2],` inside an array: set put its line there, and refused as 'not valid TOML'
    a file that is valid."""
    path().parent.mkdir(parents=True)
    path().write_text('foo = [\n  [1, 2],\n]\n[tbl]\nx = 1\n')
    config_file.set_value("model", "haiku")
    assert tomllib.loads(path().read_text()) == {
        "foo": [[1, 2]], "model": "claude-haiku-5-5", "tbl": {"x": 1}}


def test_a_layout_set_cannot_change_line_by_line_says_what_to_add_by_hand():
    path().parent.mkdir(parents=True)
    path().write_text("model.x = 1\n")  # valid TOML: a table named model
    with pytest.raises(ConfigError, match=r"is laid out in a way `config set` cannot change "
                                          r'line by line; add the line model = "claude-haiku'):
        config_file.set_value("model", "haiku")
    assert path().read_text() == "model.x = 1\n"


def test_a_bad_database_url_edited_by_hand_is_named_with_the_file():
    path().parent.mkdir(parents=True)
    path().write_text('database_url = "mysql://u@h/db"\n')
    assert "database_url" in config_file.load().bad  # only its readers refuse it
    with pytest.raises(ConfigError, match=f"^database_url in {path()}: mysql:// databases"):
        config.database_url()


def test_a_database_path_with_a_tilde_in_the_file_is_the_home_folders(tmp_path, monkeypatch):
    """The shell expands `--db ~/mem.db`; in the file nothing did, and the store was made
    in a folder named `~` under the working directory."""
    from memgpt_lite.engine.store import open_store

    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "me").mkdir()
    path().parent.mkdir(parents=True)
    path().write_text('database_url = "~/mem.db"\n')
    open_store().close()
    assert (tmp_path / "me" / "mem.db").is_file() and not (tmp_path / "~").exists()


@pytest.mark.slow
def test_two_links_to_one_file_take_one_lock(tmp_path):
    """A config file reached through two symlinks had a lock file beside each link: a
    `config set` through one did not wait for one through the other, and a change was lost.
    One process holds the lock through the first link; `config set` through the second must
    wait for it (and, held too long, change nothing)."""
    import os
    import subprocess
    import sys

    real = tmp_path / "real" / "config.toml"
    real.parent.mkdir()
    real.write_text("# mine\nmodel = \"haiku\"\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "config.toml", tmp_path / "b" / "link.toml"
    first.symlink_to(real)
    second.symlink_to(first)  # a link to the link
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, pathlib\n"
         "from memgpt_lite.engine import config_file\n"
         "with config_file._locked(pathlib.Path(sys.argv[1])):\n"
         "    print('held', flush=True)\n"
         "    sys.stdin.read()\n", str(first)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        setter = subprocess.run(
            [sys.executable, "-m", "memgpt_lite", "config", "set", "context_window", "16000"],
            capture_output=True, text=True, timeout=120,
            env=dict(os.environ, MEMGPT_LITE_CONFIG=str(second)))
    finally:
        holder.stdin.close()
        holder.wait(30)
    assert setter.returncode == 2, setter.stderr
    assert "stayed locked by another memgpt-lite" in setter.stderr
    assert real.read_text() == "# mine\nmodel = \"haiku\"\n" and second.is_symlink()
    assert not (tmp_path / "a" / ".config.toml.lock").exists()
    assert not (tmp_path / "b" / ".link.toml.lock").exists()
    # Free again: the change lands in the real file, through both links.
    assert config_file.set_value("context_window", "16000", second) == 16000
    assert tomllib.loads(first.read_text())["context_window"] == 16000 and first.is_symlink()


@pytest.mark.parametrize("text", [
    '["a]b"]\nmodel = "mine"\n',  # a table header the line rules do not read as one
    "['x y'.\"a]\"]\nmodel = \"mine\"\n[servers]\nlist = [\n  1,\n]\n",
])
def test_a_line_in_a_table_is_never_taken_for_the_setting(text):
    """`config set model haiku` rewrote `model` in the user's own table `["a]b"]` and said
    it was set, while the top-level model stayed unset."""
    path().parent.mkdir(parents=True)
    path().write_text(text)
    with pytest.raises(ConfigError, match="add the line model = \"claude-haiku-5-5\" by hand"):
        config_file.set_value("model", "haiku")
    assert path().read_text() == text
    path().write_text('model = "opus"\n' + text)  # the real line above the tables is found
    config_file.set_value("model", "haiku")
    data = tomllib.loads(path().read_text())
    assert data["model"] == "claude-haiku-5-5"
    assert path().read_text().endswith(text)
