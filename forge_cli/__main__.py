from forge_cli.cli.app import main

main()
