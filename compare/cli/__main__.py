from compare.cli.main import main

raise SystemExit(main())
