// Package doccheck reads the project's Markdown pages (README.md and docs/) so that tests can
// hold them to the code: every relative link and anchor must resolve, and every `hetgpu ...`
// command line shown must parse with the flags it names (that check lives beside the CLI, in
// sidecar/cmd/hetgpu, which is the only place that knows the flags).
package doccheck

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// Doc is what a page offers and refers to.
type Doc struct {
	// Path is the page's path relative to the repository root, with slashes.
	Path string
	// Anchors are the GitHub heading anchors of the page ("install-on-your-nomad-cluster").
	Anchors map[string]bool
	Links   []Link
	// Commands are the `hetgpu ...` command lines shown in code blocks and code spans.
	Commands []Command
	// Blocks are the page's fenced code blocks, in order, each with the marker comment
	// (<!-- NAME -->) that directly precedes it, if any.
	Blocks []Block
}

// Link is one Markdown link or image target, as written.
type Link struct {
	Target string
	Line   int
}

// Command is one hetgpu command line: Args are the words after the program name.
type Command struct {
	Text string
	Args []string
	Line int
	// Synopsis marks a usage line ([--flag VALUE], A|B, FILE...): only its flag names are
	// checked, not a full parse.
	Synopsis bool
}

// Block is a fenced code block.
type Block struct {
	Marker string
	Info   string
	Text   string
	Line   int
}

// Pages lists README.md and every .md file under docs/, relative to root, sorted.
func Pages(root string) ([]string, error) {
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(pages[1:])
	return pages, err
}

// Load parses the named pages under root.
func Load(root string, pages []string) (map[string]*Doc, error) {
	docs := map[string]*Doc{}
	for _, p := range pages {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("read page: %w", err)
		}
		docs[p] = Parse(p, src)
	}
	return docs, nil
}

var md = goldmark.New(goldmark.WithExtensions(extension.GFM))

// Parse reads one page.
func Parse(p string, src []byte) *Doc {
	d := &Doc{Path: p, Anchors: map[string]bool{}}
	root := md.Parser().Parse(text.NewReader(src))
	lineOf := func(offset int) int { return bytes.Count(src[:offset], []byte("\n")) + 1 }
	slugs := map[string]int{}
	marker := ""
	_ = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			s := Slug(plainText(n, src))
			if k := slugs[s]; k > 0 {
				slugs[s]++
				s = fmt.Sprintf("%s-%d", s, k)
			} else {
				slugs[s] = 1
			}
			d.Anchors[s] = true
			marker = ""
		case *ast.Link:
			d.Links = append(d.Links, Link{Target: string(n.Destination), Line: nodeLine(n, src, lineOf)})
		case *ast.Image:
			d.Links = append(d.Links, Link{Target: string(n.Destination), Line: nodeLine(n, src, lineOf)})
		case *ast.HTMLBlock:
			var b strings.Builder
			for i := 0; i < n.Lines().Len(); i++ {
				seg := n.Lines().At(i)
				b.Write(seg.Value(src))
			}
			s := strings.TrimSpace(b.String())
			if strings.HasPrefix(s, "<!--") && strings.HasSuffix(s, "-->") {
				marker = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(s, "<!--"), "-->"))
			}
			return ast.WalkSkipChildren, nil
		case *ast.FencedCodeBlock:
			var b strings.Builder
			for i := 0; i < n.Lines().Len(); i++ {
				seg := n.Lines().At(i)
				b.Write(seg.Value(src))
			}
			line := 1
			if n.Lines().Len() > 0 {
				line = lineOf(n.Lines().At(0).Start)
			}
			info := ""
			if n.Info != nil {
				info = strings.Fields(string(n.Info.Segment.Value(src)) + " ")[0]
			}
			d.Blocks = append(d.Blocks, Block{Marker: marker, Info: info, Text: b.String(), Line: line})
			marker = ""
			if shellLike(info) {
				for _, c := range commandsIn(b.String()) {
					c.Line += line - 1
					d.Commands = append(d.Commands, c)
				}
			}
			return ast.WalkSkipChildren, nil
		case *ast.CodeSpan:
			s := plainText(n, src)
			if c, ok := parseCommand(s); ok {
				c.Line = nodeLine(n, src, lineOf)
				d.Commands = append(d.Commands, c)
			}
			return ast.WalkSkipChildren, nil
		case *ast.Paragraph, *ast.List, *ast.Blockquote:
			marker = ""
		}
		return ast.WalkContinue, nil
	})
	return d
}

// shellLike reports whether a fenced block of this info string holds shell lines.
func shellLike(info string) bool {
	switch info {
	case "", "sh", "bash", "shell", "console", "text":
		return true
	}
	return false
}

func nodeLine(n ast.Node, src []byte, lineOf func(int) int) int {
	for p := n; p != nil; p = p.Parent() {
		if p.Type() == ast.TypeBlock && p.Lines().Len() > 0 {
			return lineOf(p.Lines().At(0).Start)
		}
		if t, ok := p.(*ast.Text); ok {
			return lineOf(t.Segment.Start)
		}
		if c := p.FirstChild(); c != nil {
			if t, ok := c.(*ast.Text); ok {
				return lineOf(t.Segment.Start)
			}
		}
	}
	return 0
}

// plainText is a node's text without markup (code spans keep their content).
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// Slug is GitHub's anchor for a heading: lower case, letters, digits, '-' and '_' kept, spaces
// to '-', everything else dropped.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// commandsIn finds hetgpu command lines in a shell block: a line (after a "$ " prompt and
// VAR=value assignments) whose program is hetgpu or a path ending in /hetgpu; a trailing
// backslash, or a next line that starts with spaces and then "[" or "-", continues it. In a
// block that shows a session (some line starts with "$ "), only prompted lines are commands;
// the rest is output.
func commandsIn(block string) []Command {
	lines := strings.Split(block, "\n")
	session := false
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "$ ") {
			session = true
		}
	}
	var out []Command
	for i := 0; i < len(lines); i++ {
		first := i
		l := strings.TrimSpace(lines[i])
		if session && !strings.HasPrefix(l, "$ ") {
			continue
		}
		l = strings.TrimPrefix(l, "$ ")
		for (strings.HasSuffix(l, "\\") || continues(lines, i+1)) && i+1 < len(lines) {
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i+1])
			i++
		}
		if c, ok := parseCommand(l); ok {
			c.Line = first + 1
			out = append(out, c)
		}
	}
	return out
}

func continues(lines []string, i int) bool {
	if i >= len(lines) {
		return false
	}
	l := lines[i]
	t := strings.TrimLeft(l, " ")
	return len(t) < len(l) && (strings.HasPrefix(t, "[") || strings.HasPrefix(t, "-"))
}

// parseCommand reads one command line; ok is false when it is not a hetgpu command.
func parseCommand(line string) (Command, bool) {
	words := Split(stripComment(line))
	for len(words) > 0 && isAssignment(words[0]) {
		words = words[1:]
	}
	if len(words) == 0 || path.Base(words[0]) != "hetgpu" {
		return Command{}, false
	}
	words = words[1:]
	if len(words) == 0 {
		return Command{}, false // the program's name, not a command line
	}
	// A shell operator ends the hetgpu part of the line.
	for i, w := range words {
		if w == "|" || w == "||" || w == "&&" || w == ";" || w == "&" || strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") || w == "<" {
			words = words[:i]
			break
		}
	}
	c := Command{Text: strings.TrimSpace(line), Args: words}
	for _, w := range words {
		if strings.ContainsAny(w, "[]|…") || strings.Contains(w, "...") || placeholder(w) {
			c.Synopsis = true
		}
	}
	return c, true
}

// placeholder reports whether w stands for a value the reader fills in: FILE, JOB, N.
func placeholder(w string) bool {
	if w == "" {
		return false
	}
	for _, r := range w {
		if !(unicode.IsUpper(r) || r == '_') {
			return false
		}
	}
	return true
}

func isAssignment(w string) bool {
	i := strings.IndexByte(w, '=')
	if i <= 0 {
		return false
	}
	for _, r := range w[:i] {
		if !(r == '_' || unicode.IsUpper(r) || unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// stripComment drops a shell comment: a # at the start of a word, outside quotes.
func stripComment(line string) string {
	var q rune
	for i, r := range line {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// Split splits a shell line into words: blanks separate, single and double quotes group
// (and are removed), a backslash escapes the next character. No expansion.
func Split(line string) []string {
	var words []string
	var b strings.Builder
	in, q, esc := false, rune(0), false
	for _, r := range line {
		switch {
		case esc:
			b.WriteRune(r)
			esc = false
		case r == '\\' && q != '\'':
			esc, in = true, true
		case q != 0:
			if r == q {
				q = 0
			} else {
				b.WriteRune(r)
			}
		case r == '\'' || r == '"':
			q, in = r, true
		case r == ' ' || r == '\t' || r == '\n' || r == '\r':
			if in {
				words = append(words, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, b.String())
	}
	return words
}

// CheckLinks returns one error per relative link whose file or anchor does not exist. Links
// with a scheme (https:, mailto:) are not followed.
func CheckLinks(root string, docs map[string]*Doc) []error {
	var errs []error
	names := make([]string, 0, len(docs))
	for p := range docs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		d := docs[p]
		for _, l := range d.Links {
			t := l.Target
			if t == "" || strings.Contains(strings.SplitN(t, "#", 2)[0], ":") {
				continue
			}
			file, frag, _ := strings.Cut(t, "#")
			target := p
			if file != "" {
				target = path.Clean(path.Join(path.Dir(p), file))
				st, err := os.Stat(filepath.Join(root, filepath.FromSlash(target)))
				if err != nil {
					errs = append(errs, fmt.Errorf("%s:%d: link %q: %s does not exist", p, l.Line, t, target))
					continue
				}
				if st.IsDir() {
					if frag != "" {
						errs = append(errs, fmt.Errorf("%s:%d: link %q: an anchor into the folder %s", p, l.Line, t, target))
					}
					continue
				}
			}
			if frag == "" {
				continue
			}
			td, ok := docs[target]
			if !ok {
				if !strings.HasSuffix(target, ".md") {
					continue
				}
				src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(target)))
				if err != nil {
					errs = append(errs, fmt.Errorf("%s:%d: link %q: %w", p, l.Line, t, err))
					continue
				}
				td = Parse(target, src)
			}
			if !td.Anchors[frag] {
				errs = append(errs, fmt.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", p, l.Line, t, target, frag))
			}
		}
	}
	return errs
}

// LoadRepo is the repository root above dir (Root), its pages (Pages) and their documents
// (Load), for a test: an error fails it.
func LoadRepo(t testing.TB, dir string) (root string, pages []string, docs map[string]*Doc) {
	t.Helper()
	root, err := Root(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pages, err = Pages(root); err != nil {
		t.Fatal(err)
	}
	if docs, err = Load(root, pages); err != nil {
		t.Fatal(err)
	}
	return root, pages, docs
}

// Root is the repository root: the nearest folder above dir with a go.mod.
func Root(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		d = up
	}
}
