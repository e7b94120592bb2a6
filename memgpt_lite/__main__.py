from memgpt_lite.cli import main

raise SystemExit(main())
