from gangsolve.cli import main

main()
