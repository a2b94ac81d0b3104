from rag.cli.main import main

main()
