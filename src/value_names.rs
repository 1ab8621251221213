//! Enum values named once. A policy, format or class enum derives clap's `ValueEnum`, which names
//! each value for the command line; `Display`, parsing from files and lists (`lru,fifo` or `all`),
//! and the messages that list the choices all take the names from there. (Serde names, for JSON,
//! are declared beside them; `tests/suite/value_names.rs` checks the two agree.)

use clap::builder::{PossibleValue, TypedValueParser};
use clap::ValueEnum;
use std::marker::PhantomData;

/// Implements `Display` as the value's command-line name (width and alignment honoured).
macro_rules! display_as_value_name {
    ($($t:ty),+ $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let value = clap::ValueEnum::to_possible_value(self).expect("no value is skipped");
                f.pad(value.get_name())
            }
        }
    )+};
}
pub(crate) use display_as_value_name;

/// Every value's name, in declaration order.
pub fn names<E: ValueEnum>() -> Vec<String> {
    E::value_variants()
        .iter()
        .filter_map(ValueEnum::to_possible_value)
        .map(|v| v.get_name().to_string())
        .collect()
}

/// Parses a name (or an alias), ignoring case: `unknown scheduling policy "lifo" (one of fcfs,
/// priority, ...)` otherwise, `what` naming the kind of value.
pub fn parse<E: ValueEnum>(s: &str, what: &str) -> Result<E, String> {
    E::from_str(s, true)
        .map_err(|_| format!("unknown {what} {s:?} (one of {})", names::<E>().join(", ")))
}

/// Serde's `deserialize_with` for a value read by its command-line name, so a file that spells
/// a run (`sim::run_spec`) takes the flags' spellings; an unknown name is [`parse`]'s message.
pub fn from_name<'de, D: serde::Deserializer<'de>, E: ValueEnum>(d: D) -> Result<E, D::Error> {
    let s = <String as serde::Deserialize>::deserialize(d)?;
    parse(&s, "value").map_err(serde::de::Error::custom)
}

/// [`from_name`] for a value that may be absent (null).
pub fn from_maybe_name<'de, D: serde::Deserializer<'de>, E: ValueEnum>(
    d: D,
) -> Result<Option<E>, D::Error> {
    <Option<String> as serde::Deserialize>::deserialize(d)?
        .map(|s| parse(&s, "value").map_err(serde::de::Error::custom))
        .transpose()
}

/// Parses a comma-separated list of names (spaces allowed) or `all`, as on the command line
/// (case matters): the values in declaration order, each once.
pub fn parse_list<E: ValueEnum + PartialEq>(s: &str, what: &str) -> Result<Vec<E>, String> {
    let mut chosen = Vec::new();
    let mut all = false;
    for name in s.split(',').map(str::trim) {
        if name == "all" {
            all = true;
        } else {
            chosen.push(E::from_str(name, false).map_err(|_| {
                format!(
                    "unknown {what} {name:?} (expected {} or all)",
                    names::<E>().join(", ")
                )
            })?);
        }
    }
    Ok(E::value_variants()
        .iter()
        .filter(|v| all || chosen.contains(v))
        .cloned()
        .collect())
}

/// The clap value parser of [`parse_list`]: `--policy lru,fifo`, `--policy all`. Help lists the
/// names and `all`; a wrong name is a one-line error that lists them too.
pub fn list_or_all<E>(what: &'static str) -> ListOrAll<E> {
    ListOrAll {
        what,
        values: PhantomData,
    }
}

#[derive(Clone)]
pub struct ListOrAll<E> {
    what: &'static str,
    values: PhantomData<fn() -> E>,
}

impl<E: ValueEnum + PartialEq + Send + Sync + 'static> TypedValueParser for ListOrAll<E> {
    type Value = Vec<E>;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Vec<E>, clap::Error> {
        let what = self.what;
        let parse = move |s: &str| parse_list::<E>(s, what);
        parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        let names = E::value_variants()
            .iter()
            .filter_map(ValueEnum::to_possible_value);
        Some(Box::new(names.chain([PossibleValue::new("all")])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
    enum Colour {
        Red,
        #[value(alias = "0")]
        DarkBlue,
        Green,
    }
    display_as_value_name!(Colour);

    #[test]
    fn names_parse_and_display_from_one_place() {
        assert_eq!(names::<Colour>(), ["red", "dark-blue", "green"]);
        assert_eq!(format!("[{:>10}]", Colour::DarkBlue), "[ dark-blue]");
        assert_eq!(parse::<Colour>("Dark-Blue", "colour"), Ok(Colour::DarkBlue));
        assert_eq!(parse::<Colour>("0", "colour"), Ok(Colour::DarkBlue));
        assert_eq!(
            parse::<Colour>("mauve", "colour"),
            Err(r#"unknown colour "mauve" (one of red, dark-blue, green)"#.to_string())
        );
    }

    #[test]
    fn lists_come_back_in_declaration_order_once_each() {
        let list = |s| parse_list::<Colour>(s, "colour");
        assert_eq!(list("all").unwrap(), Colour::value_variants());
        assert_eq!(
            list("green, red,red").unwrap(),
            [Colour::Red, Colour::Green]
        );
        assert_eq!(list("green,all").unwrap(), Colour::value_variants());
        assert_eq!(
            list("red,mauve").unwrap_err(),
            r#"unknown colour "mauve" (expected red, dark-blue, green or all)"#
        );
        assert!(list("Red").is_err(), "case matters on the command line");
    }

    #[test]
    fn the_clap_parser_lists_all_in_help_and_parses_lists() {
        #[derive(Debug, clap::Parser)]
        struct Cli {
            #[arg(long, value_parser = list_or_all::<Colour>("colour"), default_value = "all")]
            colour: std::vec::Vec<Colour>,
        }
        use clap::{CommandFactory, Parser};
        let cli = Cli::try_parse_from(["x", "--colour", "green,red"]).unwrap();
        assert_eq!(cli.colour, [Colour::Red, Colour::Green]);
        assert_eq!(Cli::try_parse_from(["x"]).unwrap().colour.len(), 3);
        let e = Cli::try_parse_from(["x", "--colour", "mauve"]).unwrap_err();
        let first = e.to_string().lines().next().unwrap().to_string();
        assert!(first.contains("unknown colour \"mauve\""), "{first}");
        let help = Cli::command().render_help().to_string();
        assert!(
            help.contains("[possible values: red, dark-blue, green, all]"),
            "{help}"
        );
    }
}
