//! The part of the Kubernetes API that `capcard k8s` writes: five objects
//! (ConfigMap, PersistentVolumeClaim, Service, two Jobs) and what they
//! hold, as typed structs, so a misspelt or misplaced field is a compile
//! error, not a pod that never starts.
//!
//! Field names, types and nesting follow the API reference of Kubernetes
//! v1.33 (`batch/v1`, `core/v1`), and each object serializes as kubectl
//! prints it: `apiVersion` and `kind` first, then its fields in
//! alphabetical order, unset fields left out. These structs replaced the
//! generated bindings of the whole API (k8s-openapi), whose build cost
//! every user a minute for five objects; the YAML they write is the same
//! byte for byte (`tests/it/cli.rs` holds it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `resources: {requests: {cpu: '2'}}`: a quantity is a string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Quantity(pub String);

/// A port by number or by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrString {
    Int(i32),
    String(String),
}

impl Default for IntOrString {
    fn default() -> Self {
        IntOrString::Int(0)
    }
}

/// The `apiVersion` and `kind` every object starts with.
macro_rules! object {
    ($(#[$doc:meta])* $name:ident, $api_version:literal, { $($(#[$field_doc:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            pub api_version: String,
            pub kind: String,
            $($(#[$field_doc])* #[serde(default, skip_serializing_if = "is_default")] pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    api_version: $api_version.to_string(),
                    kind: stringify!($name).to_string(),
                    $($field: Default::default(),)*
                }
            }
        }
    };
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

object!(
    /// `core/v1` ConfigMap.
    ConfigMap, "v1", {
        data: Option<BTreeMap<String, String>>,
        metadata: ObjectMeta,
    }
);

object!(
    /// `core/v1` PersistentVolumeClaim.
    PersistentVolumeClaim, "v1", {
        metadata: ObjectMeta,
        spec: Option<PersistentVolumeClaimSpec>,
    }
);

object!(
    /// `core/v1` Service.
    Service, "v1", {
        metadata: ObjectMeta,
        spec: Option<ServiceSpec>,
    }
);

object!(
    /// `batch/v1` Job.
    Job, "batch/v1", {
        metadata: ObjectMeta,
        spec: Option<JobSpec>,
    }
);

/// A struct of the API: camelCase names, unset fields left out.
macro_rules! fields {
    ($(#[$doc:meta])* $name:ident { $($(#[$field_doc:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $($(#[$field_doc])* #[serde(default, skip_serializing_if = "is_default")] pub $field: $ty,)*
        }
    };
}

fields!(ObjectMeta {
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
});

fields!(PersistentVolumeClaimSpec {
    access_modes: Option<Vec<String>>,
    resources: Option<VolumeResourceRequirements>,
});

fields!(VolumeResourceRequirements {
    requests: Option<BTreeMap<String, Quantity>>,
});

/// `spec.type` is a Rust keyword: `type_` in the structs, as k8s-openapi
/// names it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(default, skip_serializing_if = "is_default")]
    pub ports: Option<Vec<ServicePort>>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub selector: Option<BTreeMap<String, String>>,
    #[serde(rename = "type", default, skip_serializing_if = "is_default")]
    pub type_: Option<String>,
}

/// `port` is required: written even when zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[serde(default, skip_serializing_if = "is_default")]
    pub name: Option<String>,
    pub port: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub protocol: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub target_port: Option<IntOrString>,
}

/// `template` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    #[serde(default, skip_serializing_if = "is_default")]
    pub backoff_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub completion_mode: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub completions: Option<i32>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub parallelism: Option<i32>,
    pub template: PodTemplateSpec,
}

fields!(PodTemplateSpec {
    metadata: Option<ObjectMeta>,
    spec: Option<PodSpec>,
});

/// `containers` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "is_default")]
    pub affinity: Option<Affinity>,
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub restart_policy: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub security_context: Option<PodSecurityContext>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub volumes: Option<Vec<Volume>>,
}

fields!(Affinity {
    pod_anti_affinity: Option<PodAntiAffinity>,
});

fields!(PodAntiAffinity {
    preferred_during_scheduling_ignored_during_execution: Option<Vec<WeightedPodAffinityTerm>>,
});

/// Both fields are required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WeightedPodAffinityTerm {
    pub pod_affinity_term: PodAffinityTerm,
    pub weight: i32,
}

/// `topologyKey` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodAffinityTerm {
    #[serde(default, skip_serializing_if = "is_default")]
    pub label_selector: Option<LabelSelector>,
    pub topology_key: String,
}

fields!(LabelSelector {
    match_labels: Option<BTreeMap<String, String>>,
});

/// `name` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default, skip_serializing_if = "is_default")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub env: Option<Vec<EnvVar>>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub image_pull_policy: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub readiness_probe: Option<Probe>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub security_context: Option<SecurityContext>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub volume_mounts: Option<Vec<VolumeMount>>,
}

/// `containerPort` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPort {
    pub container_port: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub protocol: Option<String>,
}

fields!(Probe {
    http_get: Option<HTTPGetAction>,
    period_seconds: Option<i32>,
});

/// `port` is required.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HTTPGetAction {
    #[serde(default, skip_serializing_if = "is_default")]
    pub path: Option<String>,
    pub port: IntOrString,
}

/// `name` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    pub name: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub value_from: Option<EnvVarSource>,
}

fields!(EnvVarSource {
    field_ref: Option<ObjectFieldSelector>,
});

/// `fieldPath` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectFieldSelector {
    pub field_path: String,
}

fields!(ResourceRequirements {
    limits: Option<BTreeMap<String, Quantity>>,
    requests: Option<BTreeMap<String, Quantity>>,
});

fields!(SecurityContext {
    allow_privilege_escalation: Option<bool>,
    capabilities: Option<Capabilities>,
});

fields!(Capabilities {
    drop: Option<Vec<String>>,
});

/// `mountPath` and `name` are required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    pub mount_path: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub read_only: Option<bool>,
}

fields!(PodSecurityContext {
    fs_group: Option<i64>,
    run_as_non_root: Option<bool>,
    seccomp_profile: Option<SeccompProfile>,
});

/// `type` is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SeccompProfile {
    #[serde(rename = "type")]
    pub type_: String,
}

/// `name` is required; one source is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    #[serde(default, skip_serializing_if = "is_default")]
    pub config_map: Option<ConfigMapVolumeSource>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub empty_dir: Option<EmptyDirVolumeSource>,
    pub name: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

/// The ConfigMap by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigMapVolumeSource {
    pub name: String,
}

/// A scratch directory: written `{}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmptyDirVolumeSource {}

/// The claim by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaimVolumeSource {
    pub claim_name: String,
}
