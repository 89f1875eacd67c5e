//! The language a template author writes for a metric, and its bounds: conditions (`successCondition`,
//! `failureCondition`) checked before they run ([`syntax`]) and judged ([`evaluate`]) under a memory and time budget
//! ([`budget`]); the `jsonPath` that picks the value they judge ([`jsonpath`]); and the `{{ args.NAME }}` templates
//! of urls, headers, bodies and queries ([`template`]). Everything here is a pure function of what the tenant wrote
//! and what was measured; where the work runs is [`crate::isolation`].

pub mod budget;
pub mod evaluate;
pub mod jsonpath;
pub mod syntax;
pub mod template;
