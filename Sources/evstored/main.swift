import Daemon

DaemonMain.run()
