from certa.cli import main

main()
