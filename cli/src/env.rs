//! The process environment as the `coll` binary found it at start.
//!
//! Invariant: an [`Env`] is a snapshot, read once by the binary before any thread exists;
//! the command line consults only it, so library code never reads (or races with writes to)
//! the process environment, and tests choose exactly what a command sees.

use std::collections::BTreeMap;

/// Environment variables by name. Variables whose name or value is not valid text are left
/// out: a command treats them as unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// [`get`](Self::get) as an owned string, the shape lookups elsewhere take.
    pub fn lookup(&self, name: &str) -> Option<String> {
        self.get(name).map(str::to_string)
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Env {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Env {
        Env {
            vars: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Env;

    #[test]
    fn an_env_answers_what_it_was_given() {
        let env: Env = [("RANK", "1"), ("WORLD_SIZE", "4")].into_iter().collect();
        assert_eq!(env.get("RANK"), Some("1"));
        assert_eq!(env.lookup("WORLD_SIZE"), Some("4".to_string()));
        assert_eq!(env.get("MASTER_ADDR"), None);
        assert_eq!(Env::default().get("RANK"), None);
    }
}
