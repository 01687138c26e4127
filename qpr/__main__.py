from qpr.cli.main import main

raise SystemExit(main())
