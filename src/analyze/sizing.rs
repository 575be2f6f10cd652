//! Sizing (SPEC §3): replicas = ceil(target / (Cr × (1 − headroom))) + spares.
