from electra.cli import main

raise SystemExit(main())
