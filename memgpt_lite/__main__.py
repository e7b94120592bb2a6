from memgpt_lite.terminal.cli import main

raise SystemExit(main())
