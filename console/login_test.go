package console

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsKeepTokenOffCommandLines: no command in the docs puts the
// console's token on a command line (xdg-open "...?token=$(cat ...)"):
// every local user reads /proc/PID/cmdline, and a browser started that
// way keeps the token in its own for its whole life.
func TestDocsKeepTokenOffCommandLines(t *testing.T) {
	docs, _ := filepath.Glob("../docs/*.md")
	for _, f := range append(docs, "../README.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inCode := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				continue
			}
			if inCode && strings.Contains(line, "token=$(") {
				t.Errorf("%s:%d puts the console token on a command line: %s", f, i+1, line)
			}
		}
	}
}

// TestLoginForm: the way in without the token in an address: GET shows a
// form; its POST with the token logs in and leads to the base path; a
// wrong token is refused with the form again.
func TestLoginForm(t *testing.T) {
	srv, _ := start(t)
	c := client(t)
	resp, body := get(t, c, srv.URL+"/")
	if resp.StatusCode != 401 || !strings.Contains(body, `<form method="post" action="/login" id="login">`) || !strings.Contains(body, `type="password"`) {
		t.Fatalf("GET /: %s without the login form", resp.Status)
	}
	resp, body = post(t, c, srv.URL+"/login", map[string][]string{"token": {"wrong"}})
	if resp.StatusCode != 401 || !strings.Contains(body, "That is not the console") {
		t.Errorf("a wrong token: %s", resp.Status)
	}
	resp, _ = post(t, c, srv.URL+"/login", map[string][]string{"token": {testToken}})
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 303 || !baseRE.MatchString(loc) {
		t.Fatalf("the token: %s to %q, want 303 to the base path", resp.Status, loc)
	}
	if resp, _ := get(t, c, srv.URL+loc); resp.StatusCode != 200 {
		t.Errorf("after the form: %s", resp.Status)
	}
}
