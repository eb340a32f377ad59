import NATSBridge

EvstoreNATS.main()
