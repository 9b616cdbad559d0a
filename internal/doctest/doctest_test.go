// Package doctest keeps the documentation true: every Go block in README.md
// and docs/*.md compiles against the library as it is, and every command in
// docs/benchmarks.md names make targets, packages, benchmarks and files that
// exist.
package doctest

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// root is the module's root, from this package's directory.
const root = "../.."

type block struct {
	file string // relative to root
	line int    // of the opening fence
	lang string
	text string
}

// blocks returns the fenced code blocks of a Markdown file.
func blocks(t *testing.T, rel string) []block {
	t.Helper()
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []block
	var cur *block
	var body strings.Builder
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{file: rel, line: n, lang: strings.TrimPrefix(trimmed, "```")}
			body.Reset()
		case cur != nil && trimmed == "```":
			cur.text = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s:%d: unclosed code block", rel, cur.line)
	}
	return out
}

func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	return files
}

// imports are the packages a block may use without importing them: a
// block that is not a whole file gets the ones it names.
var imports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "time": "time",
	"sync": "sync", "atomic": "sync/atomic", "io": "io", "http": "net/http",
	"slog": "log/slog", "expvar": "expvar", "json": "encoding/json",
	"operation": "github.com/purgatory-go/purgatory/operation",
	"purgatory": "github.com/purgatory-go/purgatory/purgatory",
	"timer":     "github.com/purgatory-go/purgatory/timer",
}

// source turns a Go block into a file: as it is when it has a package
// clause, or else in package doc with the imports it names.
func source(b block) string {
	if strings.HasPrefix(strings.TrimSpace(b.text), "package ") {
		return b.text
	}
	var used []string
	for name, path := range imports {
		if regexp.MustCompile(`(^|[^\w.])` + name + `\.`).MatchString(b.text) {
			used = append(used, fmt.Sprintf("\t%q\n", path))
		}
	}
	slices.Sort(used)
	return fmt.Sprintf("package doc\n\nimport (\n%s)\n\n//line %s:%d\n%s", strings.Join(used, ""), b.file, b.line+1, b.text)
}

// Every Go block compiles. The blocks of one Markdown file form one
// package, a file each, so that a page can build on what it declared
// earlier; all pages build in one go build, with errors reported at the
// blocks' lines in the Markdown files.
func TestGoBlocksCompile(t *testing.T) {
	tmp := scratchDir(t)
	var pkgs []string
	n := 0
	for i, f := range docFiles(t) {
		dir := filepath.Join(tmp, fmt.Sprintf("page%d", i))
		var files int
		for _, b := range blocks(t, f) {
			if b.lang != "go" {
				continue
			}
			if files == 0 {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			name := filepath.Join(dir, fmt.Sprintf("block%d.go", files))
			if err := os.WriteFile(name, []byte(source(b)), 0o644); err != nil {
				t.Fatal(err)
			}
			files++
		}
		if files > 0 {
			rel, _ := filepath.Rel(root, dir)
			pkgs = append(pkgs, "./"+filepath.ToSlash(rel))
			n += files
		}
	}
	if n == 0 {
		t.Fatal("no Go blocks found")
	}
	cmd := exec.Command("go", append([]string{"build"}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("Go blocks in the docs do not compile:\n%s", out)
	}
	t.Logf("%d Go blocks of %d pages compiled", n, len(pkgs))
}

// envWord is a shell environment assignment, as in RUNS="E1M" bash ab.sh.
var envWord = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// Every command in docs/benchmarks.md refers to what exists.
func TestBenchmarkCommandsExist(t *testing.T) {
	targets := makeTargets(t)
	binaries := map[string]string{} // test binary built by go test -c -> package dir
	checked := 0
	for _, b := range blocks(t, "docs/benchmarks.md") {
		if b.lang != "sh" {
			continue
		}
		for i, line := range strings.Split(b.text, "\n") {
			at := fmt.Sprintf("docs/benchmarks.md:%d", b.line+1+i)
			if j := strings.Index(line, "#"); j >= 0 {
				line = line[:j]
			}
			dir := "." // cd examples && ... runs in examples
			for _, cmd := range regexp.MustCompile(`;|&&`).Split(line, -1) {
				args := fields(cmd)
				for len(args) > 0 && (args[0] == "do" || args[0] == "then") {
					args = args[1:]
				}
				// VAR=value words before a command are its environment.
				for len(args) > 0 && envWord.MatchString(args[0]) {
					args = args[1:]
				}
				if len(args) == 0 || args[0] == "for" || args[0] == "done" || args[0] == "fi" {
					continue
				}
				checked++
				switch {
				case args[0] == "cd":
					dir = filepath.Join(dir, args[1])
					mustExist(t, at, dir)
				case args[0] == "make":
					for _, a := range args[1:] {
						if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && !targets[a] {
							t.Errorf("%s: make has no target %q", at, a)
						}
					}
				case args[0] == "go" && len(args) > 1 && args[1] == "test":
					pkg := lastPackage(args)
					mustExist(t, at, filepath.Join(dir, pkg))
					if o := flagValue(args, "-o"); o != "" {
						binaries[filepath.Base(o)] = filepath.Join(dir, pkg)
					}
					if re := flagValue(args, "-bench"); re != "" {
						checkBench(t, at, filepath.Join(dir, pkg), re)
					}
				case args[0] == "go" && len(args) > 2 && (args[1] == "run" || args[1] == "build"):
					mustExist(t, at, filepath.Join(dir, lastPackage(args)))
				case strings.HasSuffix(args[0], ".test"):
					pkg, ok := binaries[filepath.Base(args[0])]
					if !ok {
						t.Errorf("%s: %s is not built by an earlier go test -c", at, args[0])
						continue
					}
					if re := flagValue(args, "-test.bench"); re != "" {
						checkBench(t, at, pkg, re)
					}
				case args[0] == "bash" || args[0] == "sh":
					mustExist(t, at, filepath.Join(dir, args[1]))
				case strings.HasPrefix(args[0], "./") || strings.HasPrefix(args[0], "../"):
					mustExist(t, at, filepath.Join(dir, args[0]))
				default:
					t.Errorf("%s: the doc test does not know the command %q; teach it", at, args[0])
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no commands found in docs/benchmarks.md")
	}
}

// fields splits a shell command into words, keeping quoted words whole.
func fields(s string) []string {
	var out []string
	var cur strings.Builder
	quote := byte(0)
	in := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// lastPackage returns the last argument that names a directory.
func lastPackage(args []string) string {
	for i := len(args) - 1; i >= 0; i-- {
		if strings.HasPrefix(args[i], "./") || args[i] == "." {
			return strings.TrimSuffix(args[i], "/...")
		}
	}
	return "."
}

func mustExist(t *testing.T, at, rel string) {
	t.Helper()
	if c := filepath.Clean(rel); c == ".." || strings.HasPrefix(c, "../") {
		// Outside the repository (the workplace's own tools, beside a
		// checkout): not the project's to promise, and absent from a bare
		// clone.
		t.Logf("%s: %s is outside the repository; not checked", at, rel)
		return
	}
	if _, err := os.Stat(filepath.Join(root, rel)); err != nil {
		t.Errorf("%s: %s does not exist", at, rel)
	}
}

// checkBench checks that the top level of a -bench pattern matches some
// Benchmark function of the package in dir. Shell variables in the
// pattern match anything.
func checkBench(t *testing.T, at, dir, pattern string) {
	t.Helper()
	top := strings.SplitN(pattern, "/", 2)[0]
	top = regexp.MustCompile(`\$\w+|\$\{\w+\}`).ReplaceAllString(top, ".*")
	re, err := regexp.Compile(top)
	if err != nil {
		t.Errorf("%s: bad -bench pattern %q: %v", at, pattern, err)
		return
	}
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fn, ok := declName(d); ok {
				if name, ok := strings.CutPrefix(fn, "Benchmark"); ok && re.MatchString(name) {
					return
				}
			}
		}
	}
	t.Errorf("%s: no benchmark in %s matches %q", at, dir, pattern)
}

// makeTargets returns the Makefile's targets.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([\w.-]+)\s*:[^=]`).FindAllStringSubmatch(string(b), -1) {
		targets[m[1]] = true
	}
	return targets
}

func declName(d ast.Decl) (string, bool) {
	fn, ok := d.(*ast.FuncDecl)
	if !ok || fn.Recv != nil {
		return "", false
	}
	return fn.Name.Name, true
}

// A type that does not embed operation.Base, or timer.TaskBase, fails to
// compile with a message that names what to embed: the sealing methods
// are named for it.
func TestSealingMessagesSayWhatToEmbed(t *testing.T) {
	tmp := scratchDir(t)
	for name, src := range map[string]string{
		"op": `package op

import "github.com/purgatory-go/purgatory/purgatory"

type notBase struct{}

func (*notBase) TryComplete() bool   { return false }
func (*notBase) OnComplete()         {}
func (*notBase) OnExpiration()       {}
func (*notBase) ForceComplete() bool { return false }
func (*notBase) IsCompleted() bool   { return false }

var _, _ = purgatory.New[string, *notBase]("x")
`,
		"task": `package task

import "github.com/purgatory-go/purgatory/timer"

type notBase struct{}

func (*notBase) Run() {}

var _ timer.Task = (*notBase)(nil)
`,
	} {
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rel, _ := filepath.Rel(root, tmp)
	pkg := "./" + filepath.ToSlash(rel) + "/"
	cmd := exec.Command("go", "build", pkg+"op", pkg+"task")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("types that embed neither base compiled")
	}
	for _, want := range []string{"missing method mustEmbedOperationBase", "missing method mustEmbedTaskBase"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the compiler's message does not say %q:\n%s", want, out)
		}
	}
}

// scratchDir skips the test without a go command, and returns a directory
// inside the module, removed when the test ends, for code to build there.
func scratchDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	tmp, err := os.MkdirTemp(root, ".doctest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	return tmp
}
