//! [`metric_set!`](crate::metric_set): a struct of Prometheus metrics declared once per metric.
//!
//! Without it, each metric of an operator is written three times — a field, its constructor in `Default`, and its
//! registration with a name and help text — in three lists that must be kept in step by hand: a metric added to
//! the struct but not to the registration is silently never exported. The macro takes each metric once, with
//! everything the three places need, and writes the struct, its `Default` and `register_into` from that one list.

/// Declares a struct of metrics: each field with its doc, type, constructor and how it is registered.
///
/// A field's registration is either `("name", "help")` — registered under that name (the caller's prefix before
/// it) — or `{ "text" }` for a set of its own, such as
/// [`ReconcileMetrics`](crate::runtime::metrics::ReconcileMetrics), whose `register(registry, text)` is called.
/// Fields are registered in the order they are declared.
///
/// ```ignore
/// common::metric_set! {
///     /// What the operator counts.
///     #[derive(Clone, Debug)]
///     pub struct Metrics {
///         /// `writes_total`.
///         pub writes: Counter = Counter::default() => ("writes", "Writes sent"),
///         /// `reconciles_total`, `reconcile_errors_total`, `reconcile_duration_seconds`.
///         pub reconcile: ReconcileMetrics = ReconcileMetrics::default() => { "reconcile passes" },
///     }
/// }
/// metrics.register_into(registry.sub_registry_with_prefix("example"));
/// ```
#[macro_export]
macro_rules! metric_set {
    (@register $registry:ident, $metric:expr, ($name:expr, $help:expr $(,)?)) => {
        $registry.register($name, $help, $metric.clone())
    };
    (@register $registry:ident, $metric:expr, { $text:expr }) => {
        $metric.register($registry, $text)
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field_vis:vis $field:ident : $type:ty = $init:expr => $registration:tt
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $(
                $(#[$field_meta])*
                $field_vis $field: $type,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $($field: $init,)* }
            }
        }

        impl $name {
            /// Registers every metric of the set in `registry` (prefixed by the caller), in declaration order.
            $vis fn register_into(&self, registry: &mut ::prometheus_client::registry::Registry) {
                $($crate::metric_set!(@register registry, self.$field, $registration);)*
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    use prometheus_client::registry::Registry;

    use crate::runtime::metrics::ReconcileMetrics;

    crate::metric_set! {
        /// A set with a plain metric, one with a constructor of its own and a shared set.
        #[derive(Debug)]
        struct Example {
            /// `writes_total`.
            writes: Counter = Counter::default() => ("writes", "Writes sent"),
            /// `wait_seconds`.
            wait: Histogram = Histogram::new(exponential_buckets(1.0, 2.0, 4)) => ("wait_seconds", "Time waited"),
            /// The shared pass metrics.
            reconcile: ReconcileMetrics = ReconcileMetrics::default() => { "example passes" },
        }
    }

    #[test]
    fn every_declared_metric_is_registered_under_the_prefix_with_its_help() {
        let mut registry = Registry::default();
        let metrics = Example::default();
        metrics.register_into(registry.sub_registry_with_prefix("example"));
        metrics.writes.inc();
        metrics.wait.observe(3.0);
        metrics.reconcile.reconciled("success");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "# HELP example_writes Writes sent.",
            "example_writes_total 1",
            "# HELP example_wait_seconds Time waited.",
            "example_wait_seconds_count 1",
            "example_wait_seconds_bucket{le=\"4.0\"} 1",
            "example_reconciles_total{result=\"success\"} 1",
            "# HELP example_reconcile_duration_seconds Duration of example passes.",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
        }
    }
}
