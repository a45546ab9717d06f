package clients

import (
	"bufio"
	"fmt"
	"net/url"
	"strings"
)

// gitCredential implements git's credential helper protocol
// (gitcredentials(7)): for "get", it reads key=value lines up to a blank
// line and, if protocol and host are those of the world's git server,
// answers with the token as the password. "store" and "erase" do nothing.
func (c *cli) gitCredential(args []string) int {
	if len(args) != 1 {
		return c.exit("usage: git-credential-airlock get|store|erase", 2)
	}
	if c.env.Stdin == nil {
		return 0
	}
	attrs := map[string]string{}
	sc := bufio.NewScanner(c.env.Stdin)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			attrs[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return c.exit("git-credential-airlock: read request: "+err.Error(), 1)
	}
	if args[0] != "get" {
		return 0
	}
	u, err := url.Parse(c.baseURL(gitEndpoint))
	if err != nil || u.Host == "" {
		return c.exit(fmt.Sprintf("git-credential-airlock: AIRLOCK_BENCH_GIT_URL %q is not a URL", c.baseURL(gitEndpoint)), 1)
	}
	if !strings.EqualFold(attrs["protocol"], u.Scheme) || !strings.EqualFold(attrs["host"], u.Host) {
		return 0
	}
	tok, err := c.token(gitEndpoint)
	if err != nil {
		return c.exit("git-credential-airlock: "+err.Error(), 1)
	}
	if tok == "" {
		return 0
	}
	fmt.Fprintf(c.env.Stdout, "username=airlock\npassword=%s\n", tok)
	return 0
}
