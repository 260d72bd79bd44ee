public enum XBeaconWire {}
