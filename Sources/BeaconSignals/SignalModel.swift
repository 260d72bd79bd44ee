/// A model object whose signal properties notify observers as one object.
///
/// ```swift
/// final class Player: SignalModel {
///     let name = MutableSignal("Ann")
///     let score = MutableSignal(0)
/// }
/// let watcher = player.observeChanges { print($0.score.peek()) }
/// batch { player.name.value = "Bo"; player.score.value = 3 }   // one notification
/// ```
///
/// Stored properties that are signals (found by reflection) are watched; a batch of writes to
/// several of them notifies once.
public protocol SignalModel: AnyObject {}

extension SignalModel {
    /// Calls `handler` whenever any signal property of the model changes (not initially).
    ///
    /// - Parameter handler: receives the model.
    /// - Returns: the observing effect; dispose it (or drop it) to stop.
    public func observeChanges(_ handler: @escaping (Self) -> Void) -> Effect {
        let signals = Mirror(reflecting: self).children.compactMap { $0.value as? any TrackableSignal }
        var isFirst = true
        return effect { [weak self] in
            for signal in signals {
                signal.trackRead()
            }
            if isFirst {
                isFirst = false
                return
            }
            if let self {
                untracked { handler(self) }
            }
        }
    }
}

/// A signal whose value can be read (and tracked) without knowing its type.
protocol TrackableSignal {
    func trackRead()
}

extension Signal: TrackableSignal {
    func trackRead() {
        _ = value
    }
}
