from qpr.cli import main

raise SystemExit(main())
