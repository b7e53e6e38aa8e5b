from reconbench.cli import main

main()
