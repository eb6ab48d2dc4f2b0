//! The eval's task suite: small Python repositories made here, in a
//! temporary directory, with the standard library only, so nothing is
//! downloaded and nothing of the user's is touched.
//!
//! Each task is what a delegate is given in real use: a brief, a tree and
//! a command that must pass. The command is a check script kept outside
//! the repository (the model cannot edit it) that runs the tests and the
//! task's own conditions, and says which one failed: `CHECK-FAIL <name>:
//! <detail>`. `solution` is what a competent model does; the tests script
//! a fake model with it, and it documents the task.

use std::path::{Path, PathBuf};

/// Which tasks to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    /// Two tasks: minutes on a mid-size model.
    Quick,
    /// Six tasks, one of each kind.
    Standard,
}

impl Suite {
    pub fn parse(s: &str) -> Option<Suite> {
        match s {
            "quick" => Some(Suite::Quick),
            "standard" => Some(Suite::Standard),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Suite::Quick => "quick",
            Suite::Standard => "standard",
        }
    }
}

/// One step of the right answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Read {
        path: &'static str,
    },
    Edit {
        path: &'static str,
        old: &'static str,
        new: &'static str,
    },
    Write {
        path: &'static str,
        content: &'static str,
    },
    Bash {
        command: &'static str,
    },
}

/// One task.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: &'static str,
    /// What kind of work it is, in a few words.
    pub kind: &'static str,
    pub files: &'static [(&'static str, &'static str)],
    pub brief: &'static str,
    /// The check script's task-specific part (Python, after the prelude).
    check: &'static str,
    pub solution: &'static [Step],
}

impl Task {
    /// The brief as the delegate gets it: tagged with the task's name.
    pub fn prompt(&self) -> String {
        format!("[localagents eval: {}]\n{}", self.name, self.brief)
    }

    /// Make the repository under `dir/repo-<name>` (files, `git init`, one
    /// commit) and its check script under `dir/checks/<name>.py`; returns
    /// (repo, check script).
    pub async fn materialize(&self, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
        let repo = dir.join(format!("repo-{}", self.name));
        std::fs::create_dir_all(&repo)?;
        // Python's caches are not the model's work.
        std::fs::write(repo.join(".gitignore"), "__pycache__/\n*.pyc\n")?;
        for (path, content) in self.files {
            let p = repo.join(path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(p, content)?;
        }
        crate::worktree::commit_all(&repo, "the task as given")
            .await
            .map_err(|e| std::io::Error::other(format!("git: {e}")))?;
        let checks = dir.join("checks");
        std::fs::create_dir_all(&checks)?;
        let script = checks.join(format!("{}.py", self.name));
        let originals: Vec<String> = self
            .files
            .iter()
            .map(|(p, c)| format!("    {}: {},", py_str(p), py_str(c)))
            .collect();
        std::fs::write(
            &script,
            format!(
                "{PRELUDE}\nORIGINAL = {{\n{}\n}}\n\n{}\nprint('CHECK-OK {}')\n",
                originals.join("\n"),
                self.check,
                self.name
            ),
        )?;
        Ok((repo, script))
    }
}

/// A Python string literal of `s` (JSON's escapes are Python's).
fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// What every check script starts with.
const PRELUDE: &str = r#"# localagents eval check: runs in the job's tree; exit 0 only if the task is done.
import ast, json, os, shutil, subprocess, sys, tempfile

# No __pycache__ in the job's tree: the check must not change what the
# model changed (a model that only talks stays "text only").
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
sys.dont_write_bytecode = True


def fail(check, detail=""):
    print(f"CHECK-FAIL {check}: {detail}".rstrip())
    sys.exit(1)


def run(args, cwd="."):
    p = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    return p.returncode, (p.stdout + p.stderr)[-1500:]


def unittest_passes(name="tests pass", cwd=".", module=None):
    args = [sys.executable, "-m", "unittest", "-q"] + ([module] if module else [])
    code, out = run(args, cwd)
    if code != 0:
        fail(name, out)
    return out


def unchanged(path):
    try:
        data = open(path, encoding="utf-8").read()
    except OSError as e:
        fail(f"{path} unchanged", str(e))
    if data != ORIGINAL[path]:
        fail(f"{path} unchanged", "the task said not to change it")


def source(path):
    try:
        return open(path, encoding="utf-8").read()
    except OSError as e:
        fail(f"{path} exists", str(e))
"#;

const STATS_PY: &str = "def last_n(items, n):\n    \"\"\"Return the last n items of a list (all of them when n is larger).\"\"\"\n    start = max(len(items) - n - 1, 0)\n    return items[start:]\n";

const TEST_STATS_PY: &str = "import unittest\n\nfrom stats import last_n\n\n\nclass LastN(unittest.TestCase):\n    def test_two(self):\n        self.assertEqual(last_n([1, 2, 3, 4], 2), [3, 4])\n\n    def test_zero(self):\n        self.assertEqual(last_n([1, 2, 3], 0), [])\n\n    def test_more_than_there_are(self):\n        self.assertEqual(last_n([1, 2], 5), [1, 2])\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";

const GREET_PY: &str = "def greeting(name):\n    return f\"Hello, {name}!\"\n";

const CLI_PY: &str = "import argparse\nimport sys\n\nfrom greet import greeting\n\n\ndef main(argv=None):\n    parser = argparse.ArgumentParser(prog=\"greet\")\n    parser.add_argument(\"name\")\n    args = parser.parse_args(argv)\n    print(greeting(args.name))\n    return 0\n\n\nif __name__ == \"__main__\":\n    sys.exit(main())\n";

const TEST_CLI_PY: &str = "import contextlib\nimport io\nimport unittest\n\nfrom cli import main\n\n\nclass Cli(unittest.TestCase):\n    def test_plain(self):\n        out = io.StringIO()\n        with contextlib.redirect_stdout(out):\n            self.assertEqual(main([\"Ada\"]), 0)\n        self.assertEqual(out.getvalue(), \"Hello, Ada!\\n\")\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";

const PRICING_PY: &str = "def calc_total(prices, tax):\n    \"\"\"The sum of prices with tax (a fraction) added, rounded to cents.\"\"\"\n    return round(sum(prices) * (1 + tax), 2)\n";

const REPORT_PY: &str = "from pricing import calc_total\n\n\ndef summary(prices, tax=0.2):\n    return f\"{len(prices)} items, total {calc_total(prices, tax):.2f}\"\n";

const TEST_PRICING_PY: &str = "import unittest\n\nfrom pricing import calc_total\nfrom report import summary\n\n\nclass Pricing(unittest.TestCase):\n    def test_total(self):\n        self.assertEqual(calc_total([10, 5], 0.2), 18.0)\n\n    def test_summary(self):\n        self.assertEqual(summary([10, 5]), \"2 items, total 18.00\")\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";

const TEXTUTIL_PY: &str = "import re\n\n\ndef slugify(text):\n    \"\"\"Lower-case `text`, turn each run of other characters than a-z and\n    0-9 into one dash, and strip dashes at both ends.\"\"\"\n    slug = re.sub(r\"[^a-z0-9]+\", \"-\", text.lower())\n    return slug.strip(\"-\")\n";

const DATES_PY: &str = "def parse_date(text):\n    \"\"\"Parse an ISO date `YYYY-MM-DD` into a (year, month, day) tuple.\"\"\"\n    year, month, day = text.split(\"-\")\n    return int(year), int(day), int(month)\n";

const TEST_DATES_PY: &str = "import unittest\n\nfrom dates import parse_date\n\n\nclass ParseDate(unittest.TestCase):\n    def test_iso(self):\n        self.assertEqual(parse_date(\"2024-03-05\"), (2024, 3, 5))\n\n    def test_end_of_year(self):\n        self.assertEqual(parse_date(\"1999-12-31\"), (1999, 12, 31))\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";

const SHAPES_PY: &str = "import math\n\n\nclass Circle:\n    def __init__(self, r):\n        self.r = r\n\n    def area(self):\n        return math.pi * self.r ** 2\n\n\nclass Square:\n    def __init__(self, side):\n        self.side = side\n\n    def area(self):\n        return self.side ** 2\n";

const TEST_SHAPES_PY: &str = "import unittest\n\nfrom shapes import Circle, Square\n\n\nclass Shapes(unittest.TestCase):\n    def test_square(self):\n        self.assertEqual(Square(3).area(), 9)\n\n    def test_circle(self):\n        self.assertAlmostEqual(Circle(1).area(), 3.14159, places=4)\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";

/// Every task, in the order they run.
pub fn all() -> Vec<Task> {
    vec![
        Task {
            name: "off_by_one",
            kind: "fix an off-by-one so the tests pass",
            files: &[("stats.py", STATS_PY), ("test_stats.py", TEST_STATS_PY)],
            brief: "The tests in test_stats.py fail: `last_n` in stats.py returns one item too many. Fix `last_n` so that `python3 -m unittest -q` passes. Do not change test_stats.py.",
            check: "unchanged(\"test_stats.py\")\nunittest_passes()\n",
            solution: &[
                Step::Read { path: "stats.py" },
                Step::Edit {
                    path: "stats.py",
                    old: "len(items) - n - 1",
                    new: "len(items) - n",
                },
            ],
        },
        Task {
            name: "cli_flag",
            kind: "add a command-line flag with a test",
            files: &[
                ("greet.py", GREET_PY),
                ("cli.py", CLI_PY),
                ("test_cli.py", TEST_CLI_PY),
            ],
            brief: "Add a `--json` flag to cli.py: with it, `python3 cli.py NAME --json` prints one line of JSON, `{\"greeting\": \"Hello, NAME!\"}`, instead of the plain greeting; without it the output stays as it is. Add a test of the flag to test_cli.py. `python3 -m unittest -q` must pass.",
            check: r#"unittest_passes()
code, out = run([sys.executable, "cli.py", "Ada", "--json"])
if code != 0:
    fail("cli.py Ada --json runs", out)
try:
    got = json.loads(out.strip().splitlines()[-1])
except (ValueError, IndexError):
    fail("--json prints JSON", out)
if got != {"greeting": "Hello, Ada!"}:
    fail("--json prints the greeting", out)
code, out = run([sys.executable, "cli.py", "Ada"])
if out != "Hello, Ada!\n":
    fail("the plain output is unchanged", out)
tests = source("test_cli.py")
if "--json" not in tests or tests.count("def test") < 2:
    fail("test_cli.py tests the flag", "no new test that passes --json")
"#,
            solution: &[
                Step::Read { path: "cli.py" },
                Step::Edit {
                    path: "cli.py",
                    old: "import argparse\n",
                    new: "import argparse\nimport json\n",
                },
                Step::Edit {
                    path: "cli.py",
                    old: "    parser.add_argument(\"name\")\n    args = parser.parse_args(argv)\n    print(greeting(args.name))\n",
                    new: "    parser.add_argument(\"name\")\n    parser.add_argument(\"--json\", action=\"store_true\")\n    args = parser.parse_args(argv)\n    if args.json:\n        print(json.dumps({\"greeting\": greeting(args.name)}))\n    else:\n        print(greeting(args.name))\n",
                },
                Step::Read {
                    path: "test_cli.py",
                },
                Step::Edit {
                    path: "test_cli.py",
                    old: "\n\nif __name__",
                    new: "\n    def test_json(self):\n        out = io.StringIO()\n        with contextlib.redirect_stdout(out):\n            self.assertEqual(main([\"Ada\", \"--json\"]), 0)\n        self.assertEqual(out.getvalue(), '{\"greeting\": \"Hello, Ada!\"}\\n')\n\n\nif __name__",
                },
            ],
        },
        Task {
            name: "rename",
            kind: "rename a function across three files",
            files: &[
                ("pricing.py", PRICING_PY),
                ("report.py", REPORT_PY),
                ("test_pricing.py", TEST_PRICING_PY),
            ],
            brief: "Rename the function `calc_total` in pricing.py to `compute_total`, and update every use of it (report.py, test_pricing.py). No file may still say `calc_total`. `python3 -m unittest -q` must pass.",
            check: r#"for f in ["pricing.py", "report.py", "test_pricing.py"]:
    if "calc_total" in source(f):
        fail("no calc_total left", f)
tree = ast.parse(source("pricing.py"))
if "compute_total" not in [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]:
    fail("pricing.py defines compute_total")
unittest_passes()
"#,
            solution: &[
                Step::Read { path: "pricing.py" },
                Step::Edit {
                    path: "pricing.py",
                    old: "def calc_total(",
                    new: "def compute_total(",
                },
                Step::Read { path: "report.py" },
                Step::Write {
                    path: "report.py",
                    content: "from pricing import compute_total\n\n\ndef summary(prices, tax=0.2):\n    return f\"{len(prices)} items, total {compute_total(prices, tax):.2f}\"\n",
                },
                Step::Read {
                    path: "test_pricing.py",
                },
                Step::Write {
                    path: "test_pricing.py",
                    content: "import unittest\n\nfrom pricing import compute_total\nfrom report import summary\n\n\nclass Pricing(unittest.TestCase):\n    def test_total(self):\n        self.assertEqual(compute_total([10, 5], 0.2), 18.0)\n\n    def test_summary(self):\n        self.assertEqual(summary([10, 5]), \"2 items, total 18.00\")\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n",
                },
            ],
        },
        Task {
            name: "write_test",
            kind: "write a missing test",
            files: &[("textutil.py", TEXTUTIL_PY)],
            brief: "textutil.py has no tests. Write test_textutil.py: unittest tests of `slugify` that pin down what its docstring says (lower case, runs of other characters become one dash, no dash at either end). Do not change textutil.py. `python3 -m unittest -q test_textutil` must pass.",
            check: r#"unchanged("textutil.py")
out = unittest_passes(module="test_textutil")
# The tests must catch a wrong slugify: each broken version must fail them.
MUTANTS = {
    "catches a slugify that does not lower-case": "import re\n\ndef slugify(text):\n    return re.sub(r'[^A-Za-z0-9]+', '-', text).strip('-')\n",
    "catches a slugify that keeps dashes at the ends": "import re\n\ndef slugify(text):\n    return re.sub(r'[^a-z0-9]+', '-', text.lower())\n",
}
for name, mutant in MUTANTS.items():
    with tempfile.TemporaryDirectory() as d:
        shutil.copy("test_textutil.py", d)
        with open(os.path.join(d, "textutil.py"), "w") as f:
            f.write(mutant)
        code, out = run([sys.executable, "-m", "unittest", "-q", "test_textutil"], cwd=d)
        if code == 0:
            fail(name, "the tests pass against it")
"#,
            solution: &[Step::Write {
                path: "test_textutil.py",
                content: "import unittest\n\nfrom textutil import slugify\n\n\nclass Slugify(unittest.TestCase):\n    def test_lower_case(self):\n        self.assertEqual(slugify(\"Hello World\"), \"hello-world\")\n\n    def test_runs_become_one_dash(self):\n        self.assertEqual(slugify(\"a  --  b\"), \"a-b\")\n\n    def test_no_dash_at_the_ends(self):\n        self.assertEqual(slugify(\"  Hi!  \"), \"hi\")\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n",
            }],
        },
        Task {
            name: "bash_fix",
            kind: "run the tests, read the failure, fix it",
            files: &[("dates.py", DATES_PY), ("test_dates.py", TEST_DATES_PY)],
            brief: "Run `python3 -m unittest -q`, read what fails, and fix the code (not the tests) until it passes.",
            check: "unchanged(\"test_dates.py\")\nunittest_passes()\n",
            solution: &[
                Step::Bash {
                    command: "python3 -m unittest -q",
                },
                Step::Read { path: "dates.py" },
                Step::Edit {
                    path: "dates.py",
                    old: "int(year), int(day), int(month)",
                    new: "int(year), int(month), int(day)",
                },
            ],
        },
        Task {
            name: "refactor",
            kind: "a two-file refactor against a fixed interface",
            files: &[("shapes.py", SHAPES_PY), ("test_shapes.py", TEST_SHAPES_PY)],
            brief: "Move the class `Square` out of shapes.py into a new module square.py. The interface is fixed: `from square import Square` must work, and `from shapes import Square` must keep working (shapes.py imports it from square.py). Do not change test_shapes.py. `python3 -m unittest -q` must pass.",
            check: r#"unchanged("test_shapes.py")
sq = ast.parse(source("square.py"))
if "Square" not in [n.name for n in sq.body if isinstance(n, ast.ClassDef)]:
    fail("square.py defines Square")
sh = ast.parse(source("shapes.py"))
if "Square" in [n.name for n in sh.body if isinstance(n, ast.ClassDef)]:
    fail("shapes.py no longer defines Square")
code, out = run([sys.executable, "-c", "from square import Square; from shapes import Square as S; assert S is Square and Square(2).area() == 4"])
if code != 0:
    fail("the interface works", out)
unittest_passes()
"#,
            solution: &[
                Step::Read { path: "shapes.py" },
                Step::Write {
                    path: "square.py",
                    content: "class Square:\n    def __init__(self, side):\n        self.side = side\n\n    def area(self):\n        return self.side ** 2\n",
                },
                Step::Write {
                    path: "shapes.py",
                    content: "import math\n\nfrom square import Square  # noqa: F401 (the interface)\n\n\nclass Circle:\n    def __init__(self, r):\n        self.r = r\n\n    def area(self):\n        return math.pi * self.r ** 2\n",
                },
            ],
        },
    ]
}

/// The tasks of a suite.
pub fn suite(s: Suite) -> Vec<Task> {
    let all = all();
    match s {
        Suite::Quick => all
            .into_iter()
            .filter(|t| matches!(t.name, "off_by_one" | "cli_flag"))
            .collect(),
        Suite::Standard => all,
    }
}

/// The check that failed, from a check script's output ("CHECK-FAIL tests
/// pass: …" → "tests pass").
pub fn failed_check(output: &str) -> Option<String> {
    output.lines().rev().find_map(|l| {
        l.strip_prefix("CHECK-FAIL ")
            .map(|rest| rest.split(':').next().unwrap_or(rest).trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_is_two_and_standard_six_of_each_kind() {
        assert_eq!(suite(Suite::Quick).len(), 2);
        let all = suite(Suite::Standard);
        assert_eq!(all.len(), 6);
        let mut names: Vec<&str> = all.iter().map(|t| t.name).collect();
        names.dedup();
        assert_eq!(names.len(), 6);
    }

    #[test]
    fn the_failed_check_is_named() {
        assert_eq!(
            failed_check("....\nCHECK-FAIL tests pass: FAILED (failures=1)").as_deref(),
            Some("tests pass")
        );
        assert_eq!(failed_check("CHECK-OK off_by_one"), None);
    }

    /// Every check fails on the task as given and passes with its solution
    /// applied: the suite can tell done from not done.
    #[test]
    fn each_check_fails_as_given_and_passes_when_solved() {
        if std::process::Command::new("python3")
            .arg("--version")
            .output()
            .is_err()
        {
            panic!("python3 is needed for the eval's checks");
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        for t in all() {
            let tmp = tempfile::tempdir().unwrap();
            let (repo, check) = rt.block_on(t.materialize(tmp.path())).unwrap();
            let run = || {
                std::process::Command::new("python3")
                    .arg(&check)
                    .current_dir(&repo)
                    .output()
                    .unwrap()
            };
            let before = run();
            assert!(!before.status.success(), "{} passes as given", t.name);
            assert!(
                failed_check(&String::from_utf8_lossy(&before.stdout)).is_some(),
                "{}: {}",
                t.name,
                String::from_utf8_lossy(&before.stdout)
            );
            for step in t.solution {
                match step {
                    Step::Edit { path, old, new } => {
                        let p = repo.join(path);
                        let text = std::fs::read_to_string(&p).unwrap();
                        assert!(text.contains(old), "{}: {old:?} not in {path}", t.name);
                        std::fs::write(&p, text.replacen(old, new, 1)).unwrap();
                    }
                    Step::Write { path, content } => {
                        std::fs::write(repo.join(path), content).unwrap()
                    }
                    Step::Read { .. } | Step::Bash { .. } => {}
                }
            }
            let after = run();
            assert!(
                after.status.success(),
                "{} fails when solved: {}{}",
                t.name,
                String::from_utf8_lossy(&after.stdout),
                String::from_utf8_lossy(&after.stderr)
            );
        }
    }
}
