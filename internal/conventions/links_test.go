package conventions

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a Markdown link or image: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// heading is a Markdown heading line.
var heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)

// anchorOf is GitHub's anchor of a heading: lower case, punctuation but
// '-' and '_' dropped, spaces as '-'.
func anchorOf(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if m := heading.FindStringSubmatch(line); m != nil && !inCode {
			out[anchorOf(m[1])] = true
		}
	}
	return out
}

// TestDocLinks: every link of the README and of docs/ resolves inside the
// repository: a file that exists, and a heading that exists for an
// anchor. Links out of the repository (http, https) are not followed, and
// none may point above its root.
func TestDocLinks(t *testing.T) {
	docs := docPages(t)
	mdFiles := markdownFiles(t)
	for _, doc := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		for _, m := range mdLink.FindAllStringSubmatch(string(src), -1) {
			target := m[1]
			if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
				r, err := filepath.Rel(root, path)
				if err != nil || strings.HasPrefix(r, "..") {
					t.Errorf("%s: link %q leaves the repository", rel, target)
					continue
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: no such file in the repository", rel, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
				t.Errorf("%s: link %q: no heading with anchor #%s", rel, target, anchor)
			}
		}
		standsAlone(t, rel, doc, string(src), mdFiles)
	}
}

var (
	// mdName is a Markdown file named in prose (DESIGN.md, docs/x.md).
	mdName = regexp.MustCompile(`\b[A-Za-z][\w-]*\.md\b`)
	// upPath is a relative path in prose that starts above its file and
	// names a directory or a file with an extension (../x/, ../x.md; a
	// bare ../owners is an example of hostile input, not a citation).
	upPath = regexp.MustCompile("(?:^|[\\s(`\"'])(\\.\\./[\\w.-]*[/.][\\w./-]*)")
	// homePath is an absolute path into a machine's home or work tree.
	homePath = regexp.MustCompile("(?:^|[\\s(`\"'=])(/(?:home|root|Users|work)/[\\w./-]*)")
)

// standsAlone: a document cites nothing a reader of the repository does
// not have — no Markdown file that is not in it, no path above its root,
// no path of the machine it was written on.
func standsAlone(t *testing.T, rel, doc, src string, mdFiles map[string]bool) {
	t.Helper()
	for _, name := range mdName.FindAllString(src, -1) {
		if !mdFiles[name] {
			t.Errorf("%s names %s, which is not in the repository", rel, name)
		}
	}
	for _, m := range upPath.FindAllStringSubmatch(src, -1) {
		if r, err := filepath.Rel(root, filepath.Join(filepath.Dir(doc), m[1])); err != nil || strings.HasPrefix(r, "..") {
			t.Errorf("%s cites %q, outside the repository", rel, m[1])
		}
	}
	for _, m := range homePath.FindAllStringSubmatch(src, -1) {
		t.Errorf("%s cites %q, a path of one machine", rel, m[1])
	}
}

// markdownFiles is the base name of every Markdown file in the repository.
func markdownFiles(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			out[d.Name()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// docPages is every Markdown page under docs/, at any depth.
func docPages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFrontDoor: the README is a front door (at most 300 lines), and every
// page under docs/ is reachable from it by links.
func TestFrontDoor(t *testing.T) {
	readme := filepath.Join(root, "README.md")
	src, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; the front door keeps to 300 (the manual is docs/)", n)
	}
	seen := map[string]bool{readme: true}
	queue := []string{readme}
	for len(queue) > 0 {
		doc := queue[0]
		queue = queue[1:]
		b, err := os.ReadFile(doc)
		if err != nil {
			continue // TestDocLinks reports it
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			file, _, _ := strings.Cut(m[1], "#")
			if file == "" || !strings.HasSuffix(file, ".md") || strings.Contains(file, "://") {
				continue
			}
			path := filepath.Clean(filepath.Join(filepath.Dir(doc), file))
			if !seen[path] {
				seen[path] = true
				queue = append(queue, path)
			}
		}
	}
	for _, doc := range docPages(t) {
		if !seen[filepath.Clean(doc)] {
			rel, _ := filepath.Rel(root, doc)
			t.Errorf("%s is not reachable from README.md by links", rel)
		}
	}
}
