//! see issue 3
