import Daemon

Evstored.main()
