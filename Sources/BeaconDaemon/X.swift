public enum XBeaconDaemon {}
