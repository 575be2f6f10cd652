//! JSONL: every call's record, one per line, labelled with its run.
