Evctl.main()
