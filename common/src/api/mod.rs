//! `tkex.tencent.com/v1alpha1`: the three custom resources, field-for-field compatible with BCS.

pub mod gamedeployment;
pub mod hook;
pub(crate) mod schema;

pub use gamedeployment::*;
pub use hook::*;

/// API group of every resource here.
pub const GROUP: &str = "tkex.tencent.com";
/// The only served and stored version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests.
pub const API_VERSION: &str = "tkex.tencent.com/v1alpha1";
