#if DEBUG
    import Synchronization

    /// A call whose failure a test can force with `Environment.injectFailure(_:at:after:)`.
    public enum FaultSite: Sendable, Hashable {
        /// `mdb_put` and `mdb_cursor_put`.
        case put
        /// `mdb_txn_commit`; an injected failure aborts the transaction, so nothing is written.
        case commit
    }

    /// The failures tests asked for on one environment. Debug builds only.
    final class FaultInjector: Sendable {
        private struct Plan {
            var code: Int32
            var successesLeft: Int
        }

        /// Armed failures by site: a test arms them on its thread, the writing thread consumes them.
        private let plans = Mutex<[FaultSite: Plan]>([:])

        func arm(_ code: Int32, at site: FaultSite, after successes: Int) {
            plans.withLock { $0[site] = Plan(code: code, successesLeft: successes) }
        }

        /// Counts one call at `site` and returns the error it must fail with, if it must.
        func failure(at site: FaultSite, operation: String) -> LMDBError? {
            let code: Int32? = plans.withLock { plans in
                guard var plan = plans[site] else { return nil }
                if plan.successesLeft > 0 {
                    plan.successesLeft -= 1
                    plans[site] = plan
                    return nil
                }
                plans[site] = nil
                return plan.code
            }
            return code.map { LMDBError(code: $0, operation: operation) }
        }

        /// Throws the armed failure for this call at `site`, if there is one.
        func check(_ site: FaultSite, operation: String) throws(LMDBError) {
            if let failure = failure(at: site, operation: operation) { throw failure }
        }
    }

    extension Environment {
        /// Makes a future call at `site` fail with `error` as if LMDB had returned it. Debug builds only.
        ///
        /// The first `calls` calls at `site` succeed; the next one fails, and the plan is used up.
        /// A failed put leaves its write transaction unusable, as a real `MDB_MAP_FULL` does.
        public func injectFailure(_ error: Int32, at site: FaultSite, after calls: Int = 0) {
            faults.arm(error, at: site, after: calls)
        }
    }
#endif
