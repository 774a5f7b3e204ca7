//! `wardgate policy new NAME --lang rust|python|javascript`: writes a ready-to-build policy project.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::args::PolicyLanguage;

/// The world every skeleton builds against: the one this gateway loads.
const WORLD: &str = include_str!("../../../wit/policy.wit");
const README: &str = include_str!("../templates/policy/README.md");

/// One file of a skeleton: its path in the project, its text, and whether it is a script.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

const fn file(path: &'static str, text: &'static str) -> TemplateFile {
    TemplateFile {
        path,
        text,
        executable: false,
    }
}

const fn script(path: &'static str, text: &'static str) -> TemplateFile {
    TemplateFile {
        path,
        text,
        executable: true,
    }
}

const RUST_FILES: &[TemplateFile] = &[
    file(
        "Cargo.toml",
        include_str!("../templates/policy/rust/Cargo.toml"),
    ),
    file(
        "src/lib.rs",
        include_str!("../templates/policy/rust/src/lib.rs"),
    ),
    file(
        ".gitignore",
        include_str!("../templates/policy/rust/gitignore"),
    ),
];

const PYTHON_FILES: &[TemplateFile] = &[
    file("app.py", include_str!("../templates/policy/python/app.py")),
    file(
        "requirements.txt",
        include_str!("../templates/policy/python/requirements.txt"),
    ),
    script(
        "build.sh",
        include_str!("../templates/policy/python/build.sh"),
    ),
    file(
        ".gitignore",
        include_str!("../templates/policy/python/gitignore"),
    ),
];

const JAVASCRIPT_FILES: &[TemplateFile] = &[
    file(
        "policy.js",
        include_str!("../templates/policy/javascript/policy.js"),
    ),
    file(
        "package.json",
        include_str!("../templates/policy/javascript/package.json"),
    ),
    script(
        "build.sh",
        include_str!("../templates/policy/javascript/build.sh"),
    ),
    file(
        ".gitignore",
        include_str!("../templates/policy/javascript/gitignore"),
    ),
];

/// What differs between languages.
struct Skeleton {
    language: &'static str,
    source: &'static str,
    files: &'static [TemplateFile],
    /// What a newcomer installs first (shown in the README).
    setup: &'static str,
    build: &'static str,
    module: &'static str,
}

fn skeleton(lang: PolicyLanguage) -> Skeleton {
    match lang {
        PolicyLanguage::Rust => Skeleton {
            language: "Rust",
            source: "src/lib.rs",
            files: RUST_FILES,
            setup: "Needs a Rust toolchain with the WebAssembly target: \
                    `rustup target add wasm32-wasip2` (once).",
            build: "cargo build --release --target wasm32-wasip2",
            module: "target/wasm32-wasip2/release/{{crate}}.wasm",
        },
        PolicyLanguage::Python => Skeleton {
            language: "Python",
            source: "app.py",
            files: PYTHON_FILES,
            setup: "Needs Python 3 and access to PyPI: the first build installs componentize-py \
                    into `.venv`.",
            build: "./build.sh",
            module: "{{name}}.wasm",
        },
        PolicyLanguage::Javascript => Skeleton {
            language: "JavaScript",
            source: "policy.js",
            files: JAVASCRIPT_FILES,
            setup: "Needs Node.js and npm: the first build installs componentize-js into \
                    `node_modules`.",
            build: "./build.sh   # or: npm run build",
            module: "{{name}}.wasm",
        },
    }
}

pub fn run(name: &str, lang: PolicyLanguage, dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    check_name(name)?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let skeleton = skeleton(lang);
    create(&dir, name, &skeleton)?;
    let module = fill(skeleton.module, name);
    println!(
        "created {} ({} policy {name})",
        dir.display(),
        skeleton.language
    );
    println!("  build:  cd {} && {}", dir.display(), skeleton.build);
    println!(
        "  check:  wardgate policy check {}",
        dir.join(&module).display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A policy name is a directory, a package and a crate name: keep it to what all accept.
fn check_name(name: &str) -> anyhow::Result<()> {
    let valid = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        anyhow::bail!(
            "`{name}` is not a usable policy name: use 1 to 64 lowercase letters, digits and \
             dashes, starting with a letter (for example `my-policy`)"
        )
    }
}

fn fill(template: &str, name: &str) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"))
}

fn create(dir: &Path, name: &str, skeleton: &Skeleton) -> anyhow::Result<()> {
    let occupied = dir
        .read_dir()
        .map(|mut entries| entries.next().is_some())
        .unwrap_or(false);
    if occupied {
        anyhow::bail!(
            "{} already exists and is not empty; choose another NAME or pass --dir",
            dir.display()
        );
    }
    let readme = README
        .replace("{{language}}", skeleton.language)
        .replace("{{source}}", skeleton.source)
        .replace("{{setup}}", skeleton.setup)
        .replace("{{build}}", skeleton.build)
        .replace("{{module}}", skeleton.module);
    let generated = [
        ("README.md", readme.as_str(), false),
        ("wit/policy.wit", WORLD, false),
    ];
    let templates = skeleton
        .files
        .iter()
        .map(|file| (file.path, file.text, file.executable));
    for (path, text, executable) in generated.into_iter().chain(templates) {
        write(&dir.join(path), &fill(text, name), executable)?;
    }
    Ok(())
}

fn write(path: &Path, text: &str, executable: bool) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    #[cfg(unix)]
    if executable {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}
