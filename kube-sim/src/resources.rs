//! The catalog of served resources: the built-in kinds (from k8s-openapi types) and the custom
//! resources registered at runtime from CustomResourceDefinitions. Discovery, OpenAPI, routing
//! and every verb read their facts (scope, names, subresources, schema, printer columns) here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, RwLock};

use k8s_openapi::{ClusterResourceScope, ListableResource, NamespaceResourceScope, Resource};
use schemars::{JsonSchema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::codec::{Codec, Typed};
use crate::schema::builtin::{BuiltinSchemas, Gvk};
use crate::schema::{Cursor, Schema};
use crate::status::GroupResource;
use crate::validation::NameRule;

/// Kind-specific behaviour the generic registry delegates to (the apiserver's "strategies").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    Plain,
    Pod,
    Namespace,
    Service,
    Secret,
    ConfigMap,
    CoreEvent,
    EventsV1,
    Node,
    Deployment,
    ReplicaSet,
    StatefulSet,
    DaemonSet,
    Job,
    ControllerRevision,
    ServiceAccount,
    Crd,
    CustomResource,
    /// Create-only, never stored (access reviews, self subject reviews).
    Review,
    Rbac,
    PersistentVolumeClaim,
    /// Never stored: computed on every read (`crate::componentstatus`).
    ComponentStatus,
}

/// How `metadata.generation` moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GenerationRule {
    /// Never set (ConfigMaps, Pods in 1.33, ...).
    None,
    /// Starts at 1 and increments when `spec` changes.
    Spec,
    /// Custom resources: increments on any change outside `metadata` (and `status`, which the
    /// main endpoint ignores when the status subresource is on).
    AllButMetadata,
}

/// `spec.replicas`-style paths of the scale subresource.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// An `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// Facts about one version of a custom resource.
#[derive(Clone, Debug)]
pub(crate) struct CustomInfo {
    pub crd_name: String,
    pub printer_columns: Vec<PrinterColumn>,
    pub has_defaults: bool,
    /// The version's `openAPIV3Schema`, published as is in OpenAPI.
    pub openapi_schema: Value,
    pub selectable_fields: Vec<String>,
    pub deprecated: bool,
    pub deprecation_warning: Option<String>,
    pub storage_version: bool,
}

/// One served group/version/resource.
#[derive(Clone)]
pub(crate) struct ResourceDef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<&'static str>,
    /// Bucket in the store; shared by every version of a resource (and by both Event APIs).
    pub storage: String,
    /// apiVersion objects are stored with.
    pub storage_api_version: String,
    pub special: Special,
    pub generation: GenerationRule,
    pub name_rule: NameRule,
    pub status_subresource: bool,
    pub scale: Option<ScalePaths>,
    /// Extra subresources served (`binding`, `finalize`...), with their verbs.
    pub extra_subresources: Vec<(&'static str, Vec<&'static str>)>,
    pub schema: Option<Schema>,
    pub codec: Option<Arc<dyn Codec>>,
    /// OpenAPI definition name of a built-in kind.
    pub definition: Option<String>,
    pub custom: Option<CustomInfo>,
}

impl std::fmt::Debug for ResourceDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResourceDef({}/{} {})", self.group, self.version, self.plural)
    }
}

impl ResourceDef {
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    pub(crate) fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    pub(crate) fn cursor(&self) -> Option<Cursor<'_>> {
        self.schema.as_ref().map(Cursor::root)
    }

    pub(crate) fn is_custom(&self) -> bool {
        self.special == Special::CustomResource
    }

    pub(crate) fn has_verb(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }
}

const ALL_VERBS: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

trait ScopeFlag {
    const NAMESPACED: bool;
}
impl ScopeFlag for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl ScopeFlag for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

struct BuiltinSpec {
    def: ResourceDef,
    register: fn(&mut SchemaGenerator),
}

fn register<T: JsonSchema>(g: &mut SchemaGenerator) {
    g.subschema_for::<T>();
}

fn builtin<T>(special: Special) -> BuiltinSpec
where
    T: Resource + ListableResource + JsonSchema + Serialize + DeserializeOwned + 'static,
    T::Scope: ScopeFlag,
{
    builtin_with_list::<T>(special, T::LIST_KIND)
}

/// Create-only kinds (reviews) have no list kind.
fn review<T>() -> BuiltinSpec
where
    T: Resource + JsonSchema + Serialize + DeserializeOwned + 'static,
    T::Scope: ScopeFlag,
{
    builtin_with_list::<T>(Special::Review, "").verbs(&["create"])
}

fn builtin_with_list<T>(special: Special, list_kind: &str) -> BuiltinSpec
where
    T: Resource + JsonSchema + Serialize + DeserializeOwned + 'static,
    T::Scope: ScopeFlag,
{
    let storage = if T::GROUP.is_empty() {
        T::URL_PATH_SEGMENT.to_string()
    } else {
        format!("{}.{}", T::URL_PATH_SEGMENT, T::GROUP)
    };
    BuiltinSpec {
        def: ResourceDef {
            group: T::GROUP.to_string(),
            version: T::VERSION.to_string(),
            kind: T::KIND.to_string(),
            list_kind: list_kind.to_string(),
            plural: T::URL_PATH_SEGMENT.to_string(),
            singular: T::KIND.to_lowercase(),
            namespaced: <T::Scope as ScopeFlag>::NAMESPACED,
            short_names: vec![],
            categories: vec![],
            verbs: ALL_VERBS.to_vec(),
            storage,
            storage_api_version: T::API_VERSION.to_string(),
            special,
            generation: GenerationRule::None,
            name_rule: NameRule::Dns1123Subdomain,
            status_subresource: false,
            scale: None,
            extra_subresources: vec![],
            schema: None,
            codec: Some(Arc::new(Typed::<T>::new())),
            definition: Some(T::schema_name().to_string()),
            custom: None,
        },
        register: register::<T>,
    }
}

impl BuiltinSpec {
    fn short(mut self, names: &[&str]) -> Self {
        self.def.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }
    fn categories(mut self, c: &[&str]) -> Self {
        self.def.categories = c.iter().map(|s| s.to_string()).collect();
        self
    }
    fn status(mut self) -> Self {
        self.def.status_subresource = true;
        self
    }
    fn generation(mut self) -> Self {
        self.def.generation = GenerationRule::Spec;
        self
    }
    fn scale(mut self) -> Self {
        self.def.scale = Some(ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".status.selector".into()),
        });
        self
    }
    fn verbs(mut self, v: &[&'static str]) -> Self {
        self.def.verbs = v.to_vec();
        self
    }
    fn name_rule(mut self, r: NameRule) -> Self {
        self.def.name_rule = r;
        self
    }
    fn extra(mut self, sub: &'static str, verbs: &[&'static str]) -> Self {
        self.def.extra_subresources.push((sub, verbs.to_vec()));
        self
    }
    fn storage(mut self, bucket: &str, api_version: &str) -> Self {
        self.def.storage = bucket.to_string();
        self.def.storage_api_version = api_version.to_string();
        self
    }
}

fn builtin_specs() -> Vec<BuiltinSpec> {
    use k8s_openapi::api::{
        admissionregistration::v1 as admissionregistration, apps::v1 as apps, authentication::v1 as authn,
        authorization::v1 as authz, autoscaling::v2 as autoscaling, batch::v1 as batch,
        coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery, events::v1 as events,
        networking::v1 as networking, policy::v1 as policy, rbac::v1 as rbac, scheduling::v1 as scheduling,
        storage::v1 as storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
    vec![
        builtin::<core::Namespace>(Special::Namespace)
            .short(&["ns"])
            .status()
            .name_rule(NameRule::Dns1123Label)
            .verbs(&["create", "delete", "get", "list", "patch", "update", "watch"])
            .extra("finalize", &["update"]),
        builtin::<core::Pod>(Special::Pod)
            .short(&["po"])
            .categories(&["all"])
            .status()
            .extra("binding", &["create"])
            .extra("eviction", &["create"])
            .extra("log", &["get"]),
        builtin::<core::Event>(Special::CoreEvent).short(&["ev"]),
        builtin::<core::ConfigMap>(Special::ConfigMap).short(&["cm"]),
        builtin::<core::Secret>(Special::Secret),
        builtin::<core::ServiceAccount>(Special::ServiceAccount).short(&["sa"]).extra("token", &["create"]),
        builtin::<core::Service>(Special::Service)
            .short(&["svc"])
            .categories(&["all"])
            .status()
            .name_rule(NameRule::Dns1035Label),
        builtin::<core::Endpoints>(Special::Plain).short(&["ep"]),
        // Written by the endpoint controllers (`crate::workloads::endpoints`), read by Service routing.
        builtin::<discovery::EndpointSlice>(Special::Plain),
        builtin::<core::PersistentVolumeClaim>(Special::PersistentVolumeClaim).short(&["pvc"]).status(),
        builtin::<core::PersistentVolume>(Special::Plain).short(&["pv"]).status(),
        builtin::<core::Node>(Special::Node).short(&["no"]).status(),
        builtin::<core::ComponentStatus>(Special::ComponentStatus).short(&["cs"]).verbs(&["get", "list"]),
        builtin::<core::LimitRange>(Special::Plain).short(&["limits"]),
        builtin::<core::ResourceQuota>(Special::Plain).short(&["quota"]).status(),
        builtin::<apps::Deployment>(Special::Deployment)
            .short(&["deploy"])
            .categories(&["all"])
            .status()
            .generation()
            .scale(),
        builtin::<apps::ReplicaSet>(Special::ReplicaSet)
            .short(&["rs"])
            .categories(&["all"])
            .status()
            .generation()
            .scale(),
        builtin::<apps::StatefulSet>(Special::StatefulSet)
            .short(&["sts"])
            .categories(&["all"])
            .status()
            .generation()
            .scale(),
        builtin::<apps::DaemonSet>(Special::DaemonSet).short(&["ds"]).categories(&["all"]).status().generation(),
        builtin::<apps::ControllerRevision>(Special::ControllerRevision),
        builtin::<batch::Job>(Special::Job).categories(&["all"]).status().generation(),
        builtin::<batch::CronJob>(Special::Plain).short(&["cj"]).categories(&["all"]).status().generation(),
        builtin::<coordination::Lease>(Special::Plain),
        builtin::<events::Event>(Special::EventsV1).short(&["ev"]).storage("events", "v1"),
        builtin::<rbac::Role>(Special::Rbac).name_rule(NameRule::PathSegment),
        builtin::<rbac::RoleBinding>(Special::Rbac).name_rule(NameRule::PathSegment),
        builtin::<rbac::ClusterRole>(Special::Rbac).name_rule(NameRule::PathSegment),
        builtin::<rbac::ClusterRoleBinding>(Special::Rbac).name_rule(NameRule::PathSegment),
        builtin::<apiext::CustomResourceDefinition>(Special::Crd)
            .short(&["crd", "crds"])
            .categories(&["api-extensions"])
            .status()
            .generation(),
        builtin::<policy::PodDisruptionBudget>(Special::Plain).short(&["pdb"]).status().generation(),
        builtin::<networking::Ingress>(Special::Plain).short(&["ing"]).status(),
        builtin::<networking::NetworkPolicy>(Special::Plain).short(&["netpol"]).generation(),
        builtin::<autoscaling::HorizontalPodAutoscaler>(Special::Plain).short(&["hpa"]).categories(&["all"]).status(),
        builtin::<storage::StorageClass>(Special::Plain).short(&["sc"]),
        builtin::<scheduling::PriorityClass>(Special::Plain).short(&["pc"]),
        // Named `<version>.<group>` (`v1.` for the core group), which the aggregator validates itself.
        builtin::<apiregistration::APIService>(Special::Plain)
            .categories(&["api-extensions"])
            .status()
            .name_rule(NameRule::PathSegment),
        builtin::<admissionregistration::ValidatingWebhookConfiguration>(Special::Plain)
            .categories(&["api-extensions"]),
        builtin::<admissionregistration::ValidatingAdmissionPolicy>(Special::Plain)
            .categories(&["api-extensions"])
            .status()
            .generation(),
        builtin::<admissionregistration::ValidatingAdmissionPolicyBinding>(Special::Plain)
            .categories(&["api-extensions"])
            .generation(),
        review::<authz::SelfSubjectAccessReview>(),
        review::<authz::SubjectAccessReview>(),
        review::<authz::SelfSubjectRulesReview>(),
        review::<authz::LocalSubjectAccessReview>(),
        review::<authn::SelfSubjectReview>(),
        review::<authn::TokenReview>(),
    ]
}

/// Built-in definitions and their schemas, computed once per process.
pub(crate) struct Builtins {
    pub defs: Vec<Arc<ResourceDef>>,
    pub schemas: BuiltinSchemas,
}

pub(crate) static BUILTINS: LazyLock<Builtins> = LazyLock::new(|| {
    let specs = builtin_specs();
    let mut registers: Vec<fn(&mut SchemaGenerator)> = specs.iter().map(|s| s.register).collect();
    // Types referenced by paths and subresources in the published OpenAPI.
    registers.push(register::<k8s_openapi::api::autoscaling::v1::Scale>);
    registers.push(register::<k8s_openapi::api::core::v1::Binding>);
    registers.push(register::<k8s_openapi::api::authentication::v1::TokenRequest>);
    registers.push(register::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>);
    registers.push(register::<k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions>);
    registers.push(register::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>);
    registers.push(register::<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList>);
    let mut gvks: Vec<Gvk> = specs
        .iter()
        .map(|s| Gvk {
            definition: s.def.definition.clone().unwrap_or_default(),
            group: s.def.group.clone(),
            version: s.def.version.clone(),
            kind: s.def.kind.clone(),
        })
        .collect();
    gvks.push(Gvk {
        definition: "io.k8s.api.autoscaling.v1.Scale".into(),
        group: "autoscaling".into(),
        version: "v1".into(),
        kind: "Scale".into(),
    });
    gvks.push(Gvk {
        definition: "io.k8s.api.core.v1.Binding".into(),
        group: "".into(),
        version: "v1".into(),
        kind: "Binding".into(),
    });
    gvks.push(Gvk {
        definition: "io.k8s.api.authentication.v1.TokenRequest".into(),
        group: "authentication.k8s.io".into(),
        version: "v1".into(),
        kind: "TokenRequest".into(),
    });
    let schemas = BuiltinSchemas::build(&registers, &gvks);
    let defs = specs
        .into_iter()
        .map(|mut s| {
            s.def.schema = s.def.definition.as_deref().and_then(|d| schemas.schema(d));
            Arc::new(s.def)
        })
        .collect();
    Builtins { defs, schemas }
});

/// Group ordering in discovery: the real server's order for built-ins, then CRD groups.
fn group_priority(group: &str) -> usize {
    const ORDER: &[&str] = &[
        "",
        "apiregistration.k8s.io",
        "apps",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "networking.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
    ];
    ORDER.iter().position(|g| *g == group).unwrap_or(ORDER.len())
}

#[derive(Default)]
struct CatalogInner {
    by_gvr: HashMap<(String, String, String), Arc<ResourceDef>>,
    /// CRD name -> its served versions.
    crds: HashMap<String, Vec<Arc<ResourceDef>>>,
}

/// The mutable set of served resources.
pub(crate) struct Catalog {
    inner: RwLock<CatalogInner>,
    /// Bumped whenever the set changes (discovery and OpenAPI ETags).
    generation: std::sync::atomic::AtomicU64,
}

/// A group in discovery order with its versions (preferred first).
pub(crate) struct GroupView {
    pub name: String,
    pub versions: Vec<(String, Vec<Arc<ResourceDef>>)>,
}

impl Catalog {
    pub(crate) fn new() -> Self {
        let mut inner = CatalogInner::default();
        for d in &BUILTINS.defs {
            inner.by_gvr.insert((d.group.clone(), d.version.clone(), d.plural.clone()), d.clone());
        }
        Self { inner: RwLock::new(inner), generation: std::sync::atomic::AtomicU64::new(1) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CatalogInner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CatalogInner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.read().by_gvr.get(&(group.to_string(), version.to_string(), plural.to_string())).cloned()
    }

    /// All served versions of a group/resource, preferred (storage or first) version first.
    pub(crate) fn versions_of(&self, group: &str, plural: &str) -> Vec<Arc<ResourceDef>> {
        let inner = self.read();
        let mut v: Vec<Arc<ResourceDef>> =
            inner.by_gvr.values().filter(|d| d.group == group && d.plural == plural).cloned().collect();
        v.sort_by_key(|d| std::cmp::Reverse(version_priority(&d.version)));
        v
    }

    /// Resolves an owner reference / event `involvedObject` (apiVersion + kind).
    pub(crate) fn by_api_version_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceDef>> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let inner = self.read();
        let exact = inner.by_gvr.values().find(|d| d.group == group && d.version == version && d.kind == kind).cloned();
        exact.or_else(|| inner.by_gvr.values().find(|d| d.group == group && d.kind == kind).cloned())
    }

    /// Every resource definition (all versions).
    pub(crate) fn all(&self) -> Vec<Arc<ResourceDef>> {
        self.read().by_gvr.values().cloned().collect()
    }

    /// Distinct storage buckets with one representative definition (the preferred version).
    pub(crate) fn storages(&self) -> Vec<Arc<ResourceDef>> {
        let inner = self.read();
        let mut by_storage: BTreeMap<String, Arc<ResourceDef>> = BTreeMap::new();
        for d in inner.by_gvr.values() {
            if d.special == Special::Review || d.special == Special::EventsV1 {
                continue;
            }
            let stored = d.api_version() == d.storage_api_version;
            match by_storage.get(&d.storage) {
                Some(existing) if existing.api_version() == existing.storage_api_version => {}
                _ if stored || !by_storage.contains_key(&d.storage) => {
                    by_storage.insert(d.storage.clone(), d.clone());
                }
                _ => {}
            }
        }
        by_storage.into_values().collect()
    }

    pub(crate) fn groups(&self) -> Vec<GroupView> {
        let inner = self.read();
        type ByVersion = BTreeMap<String, Vec<Arc<ResourceDef>>>;
        let mut groups: BTreeMap<(usize, String), ByVersion> = BTreeMap::new();
        for d in inner.by_gvr.values() {
            groups
                .entry((group_priority(&d.group), d.group.clone()))
                .or_default()
                .entry(d.version.clone())
                .or_default()
                .push(d.clone());
        }
        groups
            .into_iter()
            .map(|((_, name), versions)| {
                let mut vs: Vec<(String, Vec<Arc<ResourceDef>>)> = versions
                    .into_iter()
                    .map(|(v, mut defs)| {
                        defs.sort_by(|a, b| a.plural.cmp(&b.plural));
                        (v, defs)
                    })
                    .collect();
                vs.sort_by_key(|v| std::cmp::Reverse(version_priority(&v.0)));
                GroupView { name, versions: vs }
            })
            .collect()
    }

    /// The preferred definition serving a storage bucket.
    pub(crate) fn by_storage(&self, storage: &str) -> Option<Arc<ResourceDef>> {
        self.storages().into_iter().find(|d| d.storage == storage)
    }

    pub(crate) fn crd_versions(&self, crd_name: &str) -> Vec<Arc<ResourceDef>> {
        self.read().crds.get(crd_name).cloned().unwrap_or_default()
    }

    /// Replaces the versions served for a CRD (empty `defs` unregisters it).
    pub(crate) fn set_crd(&self, crd_name: &str, defs: Vec<ResourceDef>) {
        let mut inner = self.write();
        if let Some(old) = inner.crds.remove(crd_name) {
            for d in old {
                inner.by_gvr.remove(&(d.group.clone(), d.version.clone(), d.plural.clone()));
            }
        }
        if !defs.is_empty() {
            let arcs: Vec<Arc<ResourceDef>> = defs.into_iter().map(Arc::new).collect();
            for d in &arcs {
                inner.by_gvr.insert((d.group.clone(), d.version.clone(), d.plural.clone()), d.clone());
            }
            inner.crds.insert(crd_name.to_string(), arcs);
        }
        drop(inner);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether a plural or kind is taken by another CRD or a built-in of the same group.
    pub(crate) fn name_conflict(&self, crd_name: &str, group: &str, plural: &str, kind: &str) -> Option<String> {
        let inner = self.read();
        for d in inner.by_gvr.values() {
            if d.group != group {
                continue;
            }
            let other_crd = d.custom.as_ref().map(|c| c.crd_name.as_str());
            if other_crd == Some(crd_name) {
                continue;
            }
            if d.plural == plural {
                return Some(format!("{plural:?} is already in use"));
            }
            if d.kind == kind {
                return Some(format!("{kind:?} is already in use"));
            }
        }
        None
    }
}

impl Default for Catalog {
    fn default() -> Self {
        Self::new()
    }
}

/// Kubernetes version priority (`v1` > `v1beta2` > `v1beta1` > `v1alpha1` > others).
pub(crate) fn version_priority(v: &str) -> (u8, u32, u8, u32, String) {
    let Some(rest) = v.strip_prefix('v') else { return (0, 0, 0, 0, v.to_string()) };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else { return (0, 0, 0, 0, v.to_string()) };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 3, 0, String::new());
    }
    for (name, rank) in [("beta", 2u8), ("alpha", 1u8)] {
        if let Some(n) = tail.strip_prefix(name)
            && let Ok(minor) = n.parse::<u32>()
        {
            return (2, major, rank, minor, String::new());
        }
    }
    (0, 0, 0, 0, v.to_string())
}

/// Builds the served versions of a CRD (from its JSON).
pub(crate) fn crd_to_defs(crd: &Value) -> Result<Vec<ResourceDef>, String> {
    let spec = crd.get("spec").ok_or("CRD has no spec")?;
    let group = spec.get("group").and_then(Value::as_str).ok_or("spec.group missing")?.to_string();
    let names = spec.get("names").ok_or("spec.names missing")?;
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let list_of = |v: &Value, k: &str| -> Vec<String> {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let plural = s(names, "plural");
    let kind = s(names, "kind");
    let list_kind =
        names.get("listKind").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| format!("{kind}List"));
    let singular =
        names.get("singular").and_then(Value::as_str).map(str::to_string).unwrap_or_else(|| kind.to_lowercase());
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let crd_name = crate::meta::name(crd).to_string();
    let versions = spec.get("versions").and_then(Value::as_array).ok_or("spec.versions missing")?;
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)
        .ok_or("no storage version")?
        .to_string();
    let storage_api_version = format!("{group}/{storage_version}");
    let mut out = Vec::new();
    for v in versions {
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let version = s(v, "name");
        let openapi = v
            .get("schema")
            .and_then(|s| s.get("openAPIV3Schema"))
            .cloned()
            .unwrap_or_else(|| serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        let schema = crate::schema::from_crd_schema(&openapi);
        let has_defaults = crate::schema::defaulting::has_defaults(Cursor::root(&schema));
        let sub = v.get("subresources");
        let status_subresource = sub.and_then(|s| s.get("status")).is_some();
        let scale = sub.and_then(|s| s.get("scale")).map(|sc| ScalePaths {
            spec_replicas: s(sc, "specReplicasPath"),
            status_replicas: s(sc, "statusReplicasPath"),
            label_selector: sc.get("labelSelectorPath").and_then(Value::as_str).map(str::to_string),
        });
        let printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: s(c, "name"),
                        type_: s(c, "type"),
                        format: s(c, "format"),
                        description: s(c, "description"),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        json_path: s(c, "jsonPath"),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let selectable_fields = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                    .map(|p| p.trim_start_matches('.').to_string())
                    .collect()
            })
            .unwrap_or_default();
        out.push(ResourceDef {
            group: group.clone(),
            version: version.clone(),
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced,
            short_names: list_of(names, "shortNames"),
            categories: list_of(names, "categories"),
            verbs: ALL_VERBS.to_vec(),
            storage: format!("{plural}.{group}"),
            storage_api_version: storage_api_version.clone(),
            special: Special::CustomResource,
            generation: GenerationRule::AllButMetadata,
            name_rule: NameRule::Dns1123Subdomain,
            status_subresource,
            scale,
            extra_subresources: vec![],
            schema: Some(schema),
            codec: None,
            definition: None,
            custom: Some(CustomInfo {
                crd_name: crd_name.clone(),
                printer_columns,
                has_defaults,
                openapi_schema: openapi,
                selectable_fields,
                deprecated: v.get("deprecated").and_then(Value::as_bool).unwrap_or(false),
                deprecation_warning: v.get("deprecationWarning").and_then(Value::as_str).map(str::to_string),
                storage_version: version == storage_version,
            }),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_registered_with_schemas() {
        let c = Catalog::new();
        let pods = c.get("", "v1", "pods").unwrap();
        assert!(pods.namespaced);
        assert!(pods.schema.is_some());
        assert_eq!(pods.list_kind, "PodList");
        let nodes = c.get("", "v1", "nodes").unwrap();
        assert!(!nodes.namespaced);
        let ev = c.get("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(ev.storage, "events");
        assert_eq!(c.get("apps", "v1", "deployments").unwrap().storage, "deployments.apps");
    }

    #[test]
    fn version_ordering() {
        let mut v = vec!["v1alpha1", "v1", "v2beta1", "v1beta2", "foo", "v2"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]);
    }
}
