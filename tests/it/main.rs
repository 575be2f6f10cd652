//! The one integration-test binary, filed by topic.

mod sim;
