from envbuild._start import main

main()
