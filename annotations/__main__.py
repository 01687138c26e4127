from annotations.cli import main

raise SystemExit(main())
