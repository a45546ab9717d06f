package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// gw is a session whose egress block allows api.test, git.test, the names
// under corp.test on port 443 and ssh.test on port 22 only, with l7 =
// "check". egress goes into the block from line 6; rest follows the block,
// from line 7 plus the number of lines of egress (line 8 when egress is "").
func gw(egress, rest string) string {
	return session("  egress {\n    allow = [\"api.test:443\", \"git.test:443\", \"*.corp.test:443\", \"ssh.test:22\"]\n    l7    = \"check\"\n" + egress + "\n  }\n" + rest)
}

// secretBlock is a secret NAME from a daemon file, injected into api.test
// as x-api-key, with extra lines after from. Its first line is the block's.
func secretBlock(name, extra string) string {
	return "  secret \"" + name + "\" {\n    from = \"file:/etc/airlock/secrets/x\"\n" + extra + "\n    inject {\n      host   = \"api.test\"\n      header = \"x-api-key\"\n    }\n  }\n"
}

// credSecret is fromSecret("credential:"+name) with the manifest's
// credential name of the built-in issuer, extra lines in its block.
func credSecret(from, name, extra string) string {
	return gw("", "  secret \"K\" {\n    from = \""+from+"\"\n    inject {\n      host   = \"api.test\"\n      bearer = true\n    }\n  }\n"+
		"  credential \""+name+"\" {\n    audience = \"api.test\"\n    scopes   = [\"git.fetch repo=app\"]\n    "+extra+"\n  }")
}

// fromSecret is a secret K from from (on line 9), injected into api.test.
func fromSecret(from string) string {
	return gw("", "  secret \"K\" {\n    from = \""+from+"\"\n    inject {\n      host   = \"api.test\"\n      bearer = true\n    }\n  }")
}

// inject is a secret T whose only inject block has body (from line 11 of
// gw("", ...)).
func inject(body string) string {
	return gw("", "  secret \"T\" {\n    from = \"file:/etc/airlock/secrets/x\"\n    inject {\n"+body+"\n    }\n  }")
}

var gatewayDecodeTests = []decodeTest{
	{
		name: "every gateway block",
		src: gw(`    inspect = "all"
    http "git.test" {
      default = "ask"
      rule {
        method = "get"
        path   = "/*/info/refs"
        action = "allow"
      }
      rule {
        method = ["post", "PUT"]
        path   = "/**/git-receive-pack"
        refs   = ["refs/heads/agent/*", "refs/tags/**"]
        action = "allow"
      }
      rule {
        action = "deny"
      }
    }
    http "*.corp.test" {
    }`, `  env = { A = "1" }
  credential "git" {
    audience = "git.test"
    scopes   = ["git.fetch repo=app"]
  }
  secret "API_KEY" {
    from = "file:/etc/airlock/secrets/api"
    inject {
      host   = "api.test"
      header = "x-api-key"
    }
    inject {
      host   = "x.corp.test"
      bearer = true
    }
  }
  secret "GIT_TOKEN" {
    from    = "env:GIT_TOKEN"
    env_var = "TOKEN"
    path    = "/run/airlock/secrets/git"
    inject {
      host   = "git.test"
      header = "Private-Token"
    }
  }
  secret "FILE_ONLY" {
    from = "file:/etc/airlock/secrets/f"
    path = "/run/airlock/secrets/f"
    inject {
      host   = "git.test"
      header = "Cookie"
    }
  }
  approval {
    timeout    = "90s"
    on_timeout = "deny"
  }`),
		check: func(t *testing.T, p *Policy) {
			want := &Egress{
				Allow: []string{"api.test:443", "git.test:443", "*.corp.test:443", "ssh.test:22"}, OnBlock: OnBlockReject, L7: L7Check, Inspect: InspectAll,
				HTTP: []HTTPHost{
					{Host: "git.test", Default: HTTPAsk, Rules: []HTTPRule{
						{Methods: []string{"GET"}, Path: "/*/info/refs", Action: HTTPAllow},
						{Methods: []string{"POST", "PUT"}, Path: "/**/git-receive-pack", Refs: []string{"refs/heads/agent/*", "refs/tags/**"}, Action: HTTPAllow},
						{Action: HTTPDeny},
					}},
					{Host: "*.corp.test"},
				},
			}
			if !reflect.DeepEqual(p.Egress, want) {
				t.Errorf("egress:\n got %+v\nwant %+v", p.Egress, want)
			}
			wantSecrets := []Secret{
				{Name: "API_KEY", From: "file:/etc/airlock/secrets/api", EnvVar: "API_KEY", Inject: []SecretInject{{Host: "api.test", Header: "x-api-key"}, {Host: "x.corp.test", Bearer: true}}},
				{Name: "GIT_TOKEN", From: "env:GIT_TOKEN", EnvVar: "TOKEN", Path: "/run/airlock/secrets/git", Inject: []SecretInject{{Host: "git.test", Header: "Private-Token"}}},
				{Name: "FILE_ONLY", From: "file:/etc/airlock/secrets/f", Path: "/run/airlock/secrets/f", Inject: []SecretInject{{Host: "git.test", Header: "Cookie"}}},
			}
			if !reflect.DeepEqual(p.Secrets, wantSecrets) {
				t.Errorf("secrets:\n got %+v\nwant %+v", p.Secrets, wantSecrets)
			}
			if want := (&Approval{Timeout: Duration(90 * time.Second), OnTimeout: OnTimeoutDeny}); !reflect.DeepEqual(p.Approval, want) {
				t.Errorf("approval = %+v, want %+v", p.Approval, want)
			}
		},
	},
	{
		name: "gateway defaults",
		src:  gw("    http \"git.test\" {\n      rule {\n        action = \"ask\"\n      }\n    }", secretBlock("K", "")+"  approval {}"),
		check: func(t *testing.T, p *Policy) {
			if p.Egress.Inspect != "" || p.Egress.HTTP[0].Default != "" {
				t.Errorf("inspect %q and default %q, want both left empty", p.Egress.Inspect, p.Egress.HTTP[0].Default)
			}
			if p.Secrets[0].EnvVar != "K" || p.Secrets[0].Path != "" {
				t.Errorf("secret delivery = %q, %q, want the variable K", p.Secrets[0].EnvVar, p.Secrets[0].Path)
			}
			if want := (&Approval{Timeout: DefaultApprovalTimeout, OnTimeout: OnTimeoutDeny}); !reflect.DeepEqual(p.Approval, want) {
				t.Errorf("approval = %+v, want %+v", p.Approval, want)
			}
		},
	},
	{
		name: "http under a domain reached through an exact name",
		src:  session("  egress {\n    allow = [\"a.corp.test:443\"]\n    l7 = \"check\"\n    http \"*.corp.test\" {\n      default = \"deny\"\n    }\n  }"),
	},
	{
		name: "http under a domain reached through a narrower wildcard",
		src:  session("  egress {\n    allow = [\"*.a.corp.test:80\"]\n    l7 = \"check\"\n    http \"*.corp.test\" {\n      default = \"deny\"\n    }\n  }"),
	},

	// egress inspect and http.
	{name: "l7_ports", src: gw(`    l7_ports = [80, 443, 8443]`, "")},
	{name: "l7_ports without l7", src: session("  egress {\n    allow    = [\"a.test\"]\n    l7_ports = [8443]\n  }"), summary: "l7_ports without the L7 gateway", line: 5,
		detail: `l7 is "off". Set l7 = "check"`},
	{name: "l7_ports zero", src: gw(`    l7_ports = [0]`, ""), summary: "Invalid l7_ports", line: 6, detail: "must be a port number from 1 to 65535"},
	{name: "l7_ports too high", src: gw(`    l7_ports = [443, 65536]`, ""), summary: "Invalid l7_ports", line: 6, detail: "Element 1 of l7_ports"},
	{name: "l7_ports fraction", src: gw(`    l7_ports = [44.3]`, ""), summary: "Invalid l7_ports", line: 6},
	{name: "l7_ports twice", src: gw(`    l7_ports = [443, 443]`, ""), summary: "Invalid l7_ports", line: 6, detail: "port 443 is listed twice"},
	{name: "l7_ports not a list", src: gw(`    l7_ports = "443"`, ""), summary: "Incorrect attribute value type", line: 6},
	{name: "http host on a port of l7_ports", src: session("  egress {\n    allow    = [\"git.test:8080\"]\n    l7       = \"check\"\n    l7_ports = [8080]\n    http \"git.test\" {\n      default = \"deny\"\n    }\n  }")},
	{name: "http host not on l7_ports", src: session("  egress {\n    allow    = [\"git.test:443\"]\n    l7       = \"check\"\n    l7_ports = [8080]\n    http \"git.test\" {\n      default = \"deny\"\n    }\n  }"),
		summary: "http host not allowed", line: 7, detail: "on a port the gateway checks [8080]"},
	// A host with rules or a secret reachable on a port the gateway does
	// not check: a request there would pass by the rules and the scanner.
	{name: "http host on every port", src: session("  egress {\n    allow = [\"git.test\"]\n    l7    = \"check\"\n    http \"git.test\" {\n      default = \"deny\"\n    }\n  }"),
		summary: "http host reachable past the gateway", line: 6,
		detail: `the allow entry "git.test" lets the session reach git.test on every port, which the gateway does not check: a request sent there would pass by these rules. Allow "git.test" only on ports the gateway checks, as in "git.test:443"`},
	{name: "http host on another port too", src: session("  egress {\n    allow = [\"git.test:443\", \"git.test:8443\"]\n    l7    = \"check\"\n    http \"git.test\" {\n      default = \"deny\"\n    }\n  }"),
		summary: "http host reachable past the gateway", line: 6, detail: "git.test on port 8443"},
	{name: "http host under a wildcard on every port", src: session("  egress {\n    allow = [\"git.test:443\", \"*.git.test\"]\n    l7    = \"check\"\n    http \"git.test\" {\n      default = \"deny\"\n    }\n  }")},
	{name: "http wildcard host, a name under it on every port", src: session("  egress {\n    allow = [\"*.corp.test:443\", \"db.corp.test\"]\n    l7    = \"check\"\n    http \"*.corp.test\" {\n      default = \"deny\"\n    }\n  }"),
		summary: "http host reachable past the gateway", line: 6, detail: `the allow entry "db.corp.test" lets the session reach db.corp.test on every port`},
	{name: "http host by a parent wildcard on every port", src: session("  egress {\n    allow = [\"*.corp.test\"]\n    l7    = \"check\"\n    http \"git.corp.test\" {\n      default = \"deny\"\n    }\n  }"),
		summary: "http host reachable past the gateway", line: 6, detail: `the allow entry "*.corp.test" lets the session reach git.corp.test on every port`},
	{name: "http host on l7_ports only", src: session("  egress {\n    allow    = [\"git.test:443\", \"git.test:8443\"]\n    l7       = \"check\"\n    l7_ports = [443, 8443]\n    http \"git.test\" {\n      default = \"deny\"\n    }\n  }")},
	{name: "inject host on every port", src: session("  egress {\n    allow = [\"api.test\"]\n    l7    = \"check\"\n  }\n" + secretBlock("K", "")),
		summary: "Inject host reachable past the gateway", line: 11, detail: `the allow entry "api.test" lets the session reach api.test on every port, which the gateway does not check: the placeholder sent there would not be seen`},
	{name: "inspect unknown", src: gw(`    inspect = "some"`, ""), summary: "Invalid inspect", line: 6, detail: `"some" is not one of rules, all`},
	{name: "inspect all without l7", src: session("  egress {\n    allow   = [\"a.test\"]\n    inspect = \"all\"\n  }"), summary: "inspect needs the L7 gateway", line: 5,
		detail: `l7 = "off". Set l7 = "check"`},
	{name: "inspect rules without l7", src: session("  egress {\n    allow   = [\"a.test\"]\n    inspect = \"rules\"\n  }")},
	{name: "inspect not a string", src: gw(`    inspect = ["all"]`, ""), summary: "Incorrect attribute value type", line: 6},
	{name: "http without l7", src: session("  egress {\n    allow = [\"git.test\"]\n    l7 = \"off\"\n    http \"git.test\" {\n      default = \"deny\"\n    }\n  }"),
		summary: "http rules need the L7 gateway", line: 6, detail: `Add l7 = "check" to this egress block`},
	{name: "http without label", src: gw("    http {\n    }", ""), summary: "Missing host for http", line: 6},
	{name: "http unknown attribute", src: gw("    http \"git.test\" {\n      defaults = \"deny\"\n    }", ""), summary: "Unsupported argument", line: 7},
	{name: "http with a port", src: gw("    http \"git.test:443\" {\n    }", ""), summary: "Invalid http host", line: 6, detail: "not a bare name"},
	{name: "http with an address", src: gw("    http \"10.0.0.1\" {\n    }", ""), summary: "Invalid http host", line: 6},
	{name: "http with a URL", src: gw("    http \"https://git.test/\" {\n    }", ""), summary: "Invalid http host", line: 6},
	{name: "http inner wildcard", src: gw("    http \"g*.test\" {\n    }", ""), summary: "Invalid http host", line: 6, detail: "wildcard may only be the whole first label"},
	{name: "http upper case", src: gw("    http \"Git.test\" {\n    }", ""), summary: "Host not in canonical form", line: 6, detail: `Write "git.test"`},
	{name: "http trailing dot", src: gw("    http \"git.test.\" {\n    }", ""), summary: "Host not in canonical form", line: 6},
	{name: "http duplicate host", src: gw("    http \"git.test\" {\n    }\n    http \"git.test\" {\n      default = \"deny\"\n    }", ""), summary: "Duplicate http host", line: 8,
		detail: "The other is at /manifests/m.hcl:6,10-20"},
	{name: "http host not allowed", src: gw("    http \"other.test\" {\n    }", ""), summary: "http host not allowed", line: 6,
		detail: `no allow entry matches other.test), so these rules would never apply. Allow "other.test" on a port of l7_ports (by default 80 or 443)`},
	{name: "http host on another port", src: gw("    http \"ssh.test\" {\n    }", ""), summary: "http host not allowed", line: 6, detail: "ssh.test is allowed only on port 22"},
	{name: "http host denied", src: session("  egress {\n    allow = [\"*.corp.test\"]\n    deny  = [\"vault.corp.test\"]\n    l7    = \"check\"\n    http \"vault.corp.test\" {\n      default = \"ask\"\n    }\n  }"),
		summary: "http host not allowed", line: 7, detail: `the deny entry "vault.corp.test" refuses vault.corp.test), so these rules would never apply. Remove the deny entry`},
	{name: "http names under an exact name only", src: gw("    http \"*.api.test\" {\n    }", ""), summary: "http host not allowed", line: 6, detail: "no allow entry matches names under api.test"},
	{name: "http bad default", src: gw("    http \"git.test\" {\n      default = \"block\"\n    }", ""), summary: "Invalid default", line: 7},
	{name: "rule without action", src: gw("    http \"git.test\" {\n      rule {\n        path = \"/x\"\n      }\n    }", ""), summary: "Missing action", line: 7},
	{name: "rule bad action", src: gw("    http \"git.test\" {\n      rule {\n        action = \"permit\"\n      }\n    }", ""), summary: "Invalid action", line: 8},
	{name: "rule with a label", src: gw("    http \"git.test\" {\n      rule \"r\" {\n        action = \"deny\"\n      }\n    }", ""), summary: "Extraneous label for rule", line: 7},
	{name: "rule unknown attribute", src: gw("    http \"git.test\" {\n      rule {\n        methods = [\"GET\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Unsupported argument", line: 8},
	{name: "method not a token", src: gw("    http \"git.test\" {\n      rule {\n        method = [\"GET\",\n          \"G T\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid method", line: 9},
	{name: "method empty", src: gw("    http \"git.test\" {\n      rule {\n        method = \"\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid method", line: 8},
	{name: "method empty list", src: gw("    http \"git.test\" {\n      rule {\n        method = []\n        action = \"deny\"\n      }\n    }", ""), summary: "Empty method list", line: 8},
	{name: "method a map", src: gw("    http \"git.test\" {\n      rule {\n        method = { a = 1 }\n        action = \"deny\"\n      }\n    }", ""), summary: "Incorrect attribute value type", line: 8},
	{name: "method null element", src: gw("    http \"git.test\" {\n      rule {\n        method = [\"GET\", null]\n        action = \"deny\"\n      }\n    }", ""), summary: "Null list element", line: 8},
	{name: "method listed twice", src: gw("    http \"git.test\" {\n      rule {\n        method = [\"GET\", \"get\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Duplicate method", line: 8},
	{name: "path relative", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"api/**\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8, detail: "does not start with '/'"},
	{name: "path partial double star", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"/api**\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8, detail: "'**' must be a whole segment"},
	{name: "path query", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"/info/refs?service=git-receive-pack\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8, detail: "never the query"},
	{name: "path trailing slash", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"/api/\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8, detail: "matched cleaned"},
	{name: "path dot dot", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"/a/../b\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8},
	{name: "path escaped", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"/a%2Fb\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8, detail: "matched decoded"},
	{name: "path character class", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"/[ab]\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8},
	{name: "path space", src: gw("    http \"git.test\" {\n      rule {\n        path   = \"/a b\"\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid path pattern", line: 8},
	{name: "json condition", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"names\" {\n          values = [\"svc-dev-*-4812-a\", \"svc-dev-auth-*\"]\n        }\n        json \"prefix\" {\n          values = [\"dev/alex/\", \"dev/**\"]\n        }\n        action = \"allow\"\n      }\n    }", "")},
	{name: "json no values", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"names\" {\n          values = []\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Empty json values", line: 10, detail: "has no values"},
	{name: "json values missing", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"names\" {\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Empty json values", line: 9, detail: "has no values"},
	{name: "json empty value", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"names\" {\n          values = [\"a\", \"\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Invalid json value pattern", line: 10, detail: "an empty pattern"},
	{name: "json bad glob", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"names\" {\n          values = [\"svc**\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Invalid json value pattern", line: 10, detail: "'**' must be a whole segment"},
	{name: "json dot segment", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"keys\" {\n          values = [\"dev/../prod/*\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Invalid json value pattern", line: 10, detail: "match no allow rule"},
	{name: "json leading slash", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"keys\" {\n          values = [\"/dev/*\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Invalid json value pattern", line: 10, detail: "empty segment"},
	{name: "json dotted field", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"spec.names\" {\n          values = [\"a\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Invalid json field", line: 9, detail: "not a plain JSON key"},
	{name: "json folding field", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"nameſ\" {\n          values = [\"a\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Invalid json field", line: 9, detail: "not a plain JSON key"},
	{name: "json empty field", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"\" {\n          values = [\"a\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Invalid json field", line: 9, detail: "not a plain JSON key"},
	{name: "json field twice", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json \"names\" {\n          values = [\"a\"]\n        }\n        json \"Names\" {\n          values = [\"b\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Duplicate json field", line: 12, detail: "already named"},
	{name: "json without label", src: gw("    http \"api.test\" {\n      rule {\n        path   = \"/v1/x\"\n        json {\n          values = [\"a\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "Missing field for json", line: 9},
	{name: "json_match any on allow", src: gw("    http \"api.test\" {\n      rule {\n        path       = \"/v1/x\"\n        json_match = \"any\"\n        json \"names\" {\n          values = [\"a\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "json_match any on an allow rule", line: 9, detail: "cannot match a body by one of its targets"},
	{name: "json_match unknown", src: gw("    http \"api.test\" {\n      rule {\n        path       = \"/v1/x\"\n        json_match = \"all\"\n        json \"names\" {\n          values = [\"a\"]\n        }\n        action = \"ask\"\n      }\n    }", ""), summary: "Invalid json_match", line: 9, detail: "not one of any, every"},
	{name: "json_match without json", src: gw("    http \"api.test\" {\n      rule {\n        path       = \"/v1/x\"\n        json_match = \"every\"\n        action     = \"ask\"\n      }\n    }", ""), summary: "json_match without json", line: 9, detail: "has none"},
	{name: "json with refs", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"refs/heads/*\"]\n        json \"names\" {\n          values = [\"a\"]\n        }\n        action = \"allow\"\n      }\n    }", ""), summary: "refs and json in one rule", line: 8, detail: "not both"},
	{name: "json field case across rules", src: gw("    http \"api.test\" {\n      rule {\n        json \"names\" {\n          values = [\"a\"]\n        }\n        action = \"allow\"\n      }\n      rule {\n        json \"Names\" {\n          values = [\"b\"]\n        }\n        action = \"deny\"\n      }\n    }", ""), summary: "json field differs only in case", line: 14, detail: "Write \"names\""},
	{name: "body digest", src: gw("    http \"api.test\" {\n      rule {\n        method      = \"POST\"\n        path        = \"/documents\"\n        body_sha256 = [\"6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b\"]\n        action      = \"allow\"\n      }\n    }", "")},
	{name: "body digest upper case", src: gw("    http \"api.test\" {\n      rule {\n        body_sha256 = [\"6B86B273FF34FCE19D6B804EFF5A3F5747ADA4EAA22F1D49C01E52DDB7875B4B\"]\n        action      = \"allow\"\n      }\n    }", ""), summary: "Invalid body digest", line: 8, detail: "not 64 lower-case hex digits"},
	{name: "body digest short", src: gw("    http \"api.test\" {\n      rule {\n        body_sha256 = [\"6b86b273ff34fce19d6b804eff5a3f5747ada4ea\"]\n        action      = \"allow\"\n      }\n    }", ""), summary: "Invalid body digest", line: 8},
	{name: "body digest none", src: gw("    http \"api.test\" {\n      rule {\n        body_sha256 = []\n        action      = \"allow\"\n      }\n    }", ""), summary: "Empty body_sha256", line: 8, detail: "could never match"},
	{name: "body digest with json", src: gw("    http \"api.test\" {\n      rule {\n        body_sha256 = [\"6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b\"]\n        json \"names\" {\n          values = [\"a\"]\n        }\n        action      = \"allow\"\n      }\n    }", ""), summary: "body_sha256 with refs or json", line: 8, detail: "at most one of them"},
	{name: "refs short", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"main\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid refs pattern", line: 8, detail: "starting with refs/"},
	{name: "refs dot dot", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"refs/heads/a..b\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid refs pattern", line: 8},
	{name: "refs space", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"refs/heads/a b\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid refs pattern", line: 8},
	{name: "refs question mark", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"refs/heads/?\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid refs pattern", line: 8},
	{name: "refs partial double star", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"refs/heads/**x\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid refs pattern", line: 8, detail: "whole segment"},
	{name: "refs trailing slash", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"refs/heads/\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid refs pattern", line: 8},
	{name: "refs lock", src: gw("    http \"git.test\" {\n      rule {\n        refs   = [\"refs/heads/x.lock\"]\n        action = \"deny\"\n      }\n    }", ""), summary: "Invalid refs pattern", line: 8},

	// secret.
	{name: "secret without egress", src: session(secretBlock("K", "")), summary: "Secrets need the L7 gateway", line: 3, detail: "has no egress block"},
	{name: "secret without l7", src: session("  egress {\n    allow = [\"api.test\"]\n  }\n" + secretBlock("K", "")), summary: "Secrets need the L7 gateway", line: 6, detail: `Add l7 = "check"`},
	{name: "secret without label", src: gw("", "  secret {\n  }"), summary: "Missing name for secret", line: 8},
	{name: "secret name", src: gw("", secretBlock("API-KEY", "")), summary: "Invalid secret name", line: 8},
	{name: "secret name with digit first", src: gw("", secretBlock("1KEY", "")), summary: "Invalid secret name", line: 8},
	{name: "duplicate secret", src: gw("", secretBlock("K", "    env_var = \"A\"")+secretBlock("K", "    env_var = \"B\"")), summary: "Duplicate secret", line: 16},
	{name: "secret without from", src: gw("", "  secret \"K\" {\n    inject {\n      host   = \"api.test\"\n      header = \"x-api-key\"\n    }\n  }"), summary: "Missing from", line: 8},
	{name: "secret from a gateway credential", src: credSecret("credential:tok", "tok", `deliver = "gateway"`)},
	{name: "gateway credential no secret uses", src: credSecret("credential:other", "tok", `deliver = "gateway"`), summary: "Invalid from", line: 9},
	{name: "secret from an unknown credential", src: fromSecret("credential:tok"), summary: "Invalid from", line: 9, detail: `the manifest declares no credential "tok"`},
	{name: "secret from a file credential", src: credSecret("credential:tok", "tok", ""), summary: "Credential also in the sandbox", line: 9,
		detail: `credential "tok" is delivered into the sandbox (deliver = "file")`},
	{name: "secret from an env credential", src: credSecret("credential:tok", "tok", "deliver = \"env\"\n    env_var = \"TOK\""), summary: "Credential also in the sandbox", line: 9},
	{name: "secret from a bad credential name", src: fromSecret("credential:a b"), summary: "Invalid from", line: 9, detail: "does not name a credential"},
	{name: "gateway credential with a path", src: credSecret("credential:tok", "tok", "deliver = \"gateway\"\n    path = \"/run/x\""), summary: "path needs deliver = \"file\"", line: 19},
	{name: "secret from a vault", src: fromSecret("vault:kv/x"), summary: "Invalid from", line: 9, detail: "neither env:VAR, file:/PATH nor credential:NAME"},
	{name: "secret from no variable", src: fromSecret("env:"), summary: "Invalid from", line: 9, detail: "names no variable"},
	{name: "secret from a bad variable", src: fromSecret("env:A-B"), summary: "Invalid from", line: 9},
	{name: "secret from a relative file", src: fromSecret("file:secrets/k"), summary: "Invalid from", line: 9, detail: "not an absolute path"},
	{name: "secret from an unclean file", src: fromSecret("file:/etc/airlock/secrets/../../shadow"), summary: "Invalid from", line: 9, detail: `write "/etc/shadow"`},
	{name: "secret from a directory", src: fromSecret("file:/etc/airlock/secrets/"), summary: "Invalid from", line: 9},
	{name: "secret env_var invalid", src: gw("", secretBlock("K", "    env_var = \"A B\"")), summary: "Invalid env_var", line: 10},
	{name: "secret env_var set by env", src: gw("", "  env = { TOKEN = \"x\" }\n"+secretBlock("K", "    env_var = \"TOKEN\"")), summary: "Conflicting secret delivery", line: 11,
		detail: `the placeholder's variable TOKEN is already set by env["TOKEN"]`},
	{name: "secret name is the variable set by env", src: gw("", "  env = { K = \"x\" }\n"+secretBlock("K", "")), summary: "Conflicting secret delivery", line: 9},
	{name: "secret env_var of an env credential", src: gw("", "  credential \"c\" {\n    audience = \"a\"\n    scopes   = [\"git.fetch repo=app\"]\n    deliver  = \"env\"\n    env_var  = \"TOKEN\"\n  }\n"+secretBlock("K", "    env_var = \"TOKEN\"")),
		summary: "Conflicting secret delivery", line: 16, detail: "already set by credentials[0].env_var"},
	{name: "secrets share a variable", src: gw("", secretBlock("TOKEN", "")+secretBlock("K", "    env_var = \"TOKEN\"")), summary: "Conflicting secret delivery", line: 18, detail: "already set by secrets[0].name"},
	{name: "secret path relative", src: gw("", secretBlock("K", "    path = \"run/k\"")), summary: "Invalid secret path", line: 10},
	{name: "secret path a directory", src: gw("", secretBlock("K", "    path = \"/run/airlock/secrets/\"")), summary: "Invalid secret path", line: 10, detail: "does not name a file"},
	{name: "secret path under proc", src: gw("", secretBlock("K", "    path = \"/proc/k\"")), summary: "Invalid secret path", line: 10, detail: "under /proc"},
	{name: "secret path of a credential", src: gw("", "  credential \"git\" {\n    audience = \"a\"\n    scopes   = [\"git.fetch repo=app\"]\n  }\n"+secretBlock("K", "    path = \"/run/airlock/credentials/git\"")),
		summary: "Conflicting secret delivery", line: 14, detail: "is already used by credentials[0].path"},
	{name: "secret path among credentials", src: gw("", "  credential \"git\" {\n    audience = \"a\"\n    scopes   = [\"git.fetch repo=app\"]\n  }\n"+secretBlock("K", "    path = \"/run/airlock/credentials/k\"")),
		summary: "Conflicting secret delivery", line: 14, detail: "is in the directory airlock fills with the credential files of credentials[0].path"},
	{name: "secret path in a workspace", src: gw("", "  workspace \".\" { target = \"/workspace\" }\n"+secretBlock("K", "    path = \"/workspace/.key\"")),
		summary: "Conflicting secret delivery", line: 11, detail: "is inside the target of workspaces[0].target"},
	{name: "secret path on a mount", src: gw("", "  mount \"/srv/k\" { target = \"/k\" }\n"+secretBlock("K", "    path = \"/k\"")), summary: "Conflicting secret delivery", line: 11},
	{name: "secrets share a path", src: gw("", secretBlock("A", "    path = \"/run/s/k\"")+secretBlock("B", "    path = \"/run/s/k\"")), summary: "Conflicting secret delivery", line: 18, detail: "is already used by secrets[0].path"},
	{name: "secret path beneath another", src: gw("", secretBlock("A", "    path = \"/run/s/k\"")+secretBlock("B", "    path = \"/run/s/k/x\"")), summary: "Conflicting secret delivery", line: 18, detail: "both a file and a directory"},
	{name: "inject unknown attribute", src: inject("      host   = \"api.test\"\n      header = \"x-api-key\"\n      prefix = \"Token \""), summary: "Unsupported argument", line: 13},
	{name: "inject without host", src: inject("      header = \"x-api-key\""), summary: "Missing inject host", line: 10},
	{name: "inject wildcard host", src: inject("      host   = \"*.corp.test\"\n      header = \"x-api-key\""), summary: "Wildcard inject host", line: 11, detail: "any name under corp.test"},
	{name: "inject host with a port", src: inject("      host   = \"api.test:443\"\n      header = \"x-api-key\""), summary: "Invalid inject host", line: 11},
	{name: "inject host upper case", src: inject("      host   = \"API.test\"\n      header = \"x-api-key\""), summary: "Host not in canonical form", line: 11},
	{name: "inject host not allowed", src: inject("      host   = \"api.openai.com\"\n      header = \"x-api-key\""), summary: "Inject host not allowed", line: 11, detail: "no allow entry matches api.openai.com"},
	{name: "inject host without TLS", src: inject("      host   = \"ssh.test\"\n      header = \"x-api-key\""), summary: "Inject host not allowed", line: 11, detail: "allowed only on port 22"},
	{name: "inject host under a wildcard entry", src: inject("      host   = \"x.corp.test\"\n      header = \"x-api-key\"")},
	{name: "inject without header", src: inject("      host   = \"api.test\""), summary: "Missing header", line: 10},
	{name: "inject bearer false", src: inject("      host   = \"api.test\"\n      bearer = false"), summary: "Missing header", line: 10},
	{name: "inject header and bearer", src: inject("      host   = \"api.test\"\n      header = \"x-api-key\"\n      bearer = true"), summary: "Both header and bearer", line: 12},
	{name: "inject header not a token", src: inject("      host   = \"api.test\"\n      header = \"x api key\""), summary: "Invalid header", line: 12},
	{name: "inject header colon", src: inject("      host   = \"api.test\"\n      header = \":authority\""), summary: "Invalid header", line: 12},
	{name: "inject Host", src: inject("      host   = \"api.test\"\n      header = \"host\""), summary: "Header owned by the gateway", line: 12},
	{name: "inject Transfer-Encoding", src: inject("      host   = \"api.test\"\n      header = \"Transfer-Encoding\""), summary: "Header owned by the gateway", line: 12},
	{name: "inject Content-Length", src: inject("      host   = \"api.test\"\n      header = \"content-length\""), summary: "Header owned by the gateway", line: 12},
	{name: "inject Proxy-Authorization", src: inject("      host   = \"api.test\"\n      header = \"Proxy-Authorization\""), summary: "Header owned by the gateway", line: 12},
	{name: "inject Connection", src: inject("      host   = \"api.test\"\n      header = \"connection\""), summary: "Header owned by the gateway", line: 12},
	{name: "inject Authorization", src: inject("      host   = \"api.test\"\n      header = \"Authorization\"")},
	{name: "inject twice in one secret", src: gw("", "  secret \"K\" {\n    from = \"file:/etc/airlock/secrets/k\"\n    inject {\n      host   = \"api.test\"\n      header = \"X-Api-Key\"\n    }\n    inject {\n      host   = \"api.test\"\n      header = \"x-api-key\"\n    }\n  }"),
		summary: "Duplicate injection", line: 16, detail: "X-Api-Key to api.test is already set by secrets[0].inject[0]"},
	{name: "bearer and Authorization across secrets", src: gw("", "  secret \"A\" {\n    from = \"file:/etc/airlock/secrets/a\"\n    inject {\n      host   = \"api.test\"\n      bearer = true\n    }\n  }\n  secret \"B\" {\n    from = \"file:/etc/airlock/secrets/b\"\n    inject {\n      host   = \"api.test\"\n      header = \"authorization\"\n    }\n  }"),
		summary: "Duplicate injection", line: 19, detail: "Authorization to api.test is already set by secrets[0].inject[0]"},
	{name: "same header to two hosts", src: gw("", "  secret \"K\" {\n    from = \"file:/etc/airlock/secrets/k\"\n    inject {\n      host   = \"api.test\"\n      bearer = true\n    }\n    inject {\n      host   = \"git.test\"\n      bearer = true\n    }\n  }")},

	// approval.
	{name: "approval timeout too long", src: session("  approval {\n    timeout = \"25h\"\n  }"), summary: "Invalid approval timeout", line: 4, detail: "longer than the maximum 24h0m0s"},
	{name: "approval timeout zero", src: session("  approval {\n    timeout = \"0s\"\n  }"), summary: "Invalid duration", line: 4},
	{name: "approval timeout a number", src: session("  approval {\n    timeout = 300\n  }"), summary: "Invalid duration", line: 4},
	{name: "approval on_timeout allow", src: session("  approval {\n    on_timeout = \"allow\"\n  }"), summary: "Invalid on_timeout", line: 4},
	{name: "approval twice", src: session("  approval {}\n  approval {}"), summary: "Duplicate approval block", line: 4},
	{name: "approval with a label", src: session("  approval \"x\" {}"), summary: "Extraneous label for approval", line: 3},
}

func TestDecodeGateway(t *testing.T) {
	runDecodeTests(t, gatewayDecodeTests)
}

func TestDecodeGatewayWarnings(t *testing.T) {
	src := gw(`    http "git.test" {
      rule {
        refs   = ["refs/heads/agent/*"]
        path   = "/*/info/refs"
        action = "allow"
      }
      rule {
        method = "GET"
        refs   = ["refs/heads/agent/*"]
        action = "allow"
      }
      rule {
        action = "deny"
      }
      rule {
        method = "POST"
        path   = "/**"
        refs   = ["refs/heads/agent/*"]
        action = "allow"
      }
    }`, "  approval {\n    timeout = \"1m\"\n  }\n  secret \"K\" {\n    from = \"file:/etc/airlock/secrets/k\"\n  }")
	p, derr := Decode("m.hcl", []byte(src), nil)
	if p == nil || derr.HasErrors() {
		t.Fatalf("Decode: %v", derr)
	}
	checkDiagnostics(t, derr)
	var got []string
	for _, d := range derr.Warnings() {
		got = append(got, strconv.Itoa(d.Line)+":"+d.Summary)
	}
	want := []string{
		"9:refs rule never matches a push",
		"13:refs rule never matches a push",
		"17:Rule matches every request",
		"28:Approval without ask",
		"31:Secret guarded only",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("warnings = %q, want %q\n%v", got, want, derr.Diagnostics())
	}
}

// TestValidateAddressBesideChecked: an address entry of allow in a block
// with hosts the gateway checks is warned of, once per entry, whatever
// hosts are checked (http blocks, a secret's inject host); without them,
// or without the gateway, it is not.
func TestValidateAddressBesideChecked(t *testing.T) {
	warnings := func(p *Policy) []string {
		var out []string
		for _, pr := range p.check() {
			if pr.warning && pr.summary == "Address entry beside checked hosts" {
				out = append(out, strings.Join(pr.path, ".")+": "+pr.msg)
			}
		}
		return out
	}
	base := func() *Policy {
		p := &Policy{Label: "t", Image: "i", Command: []string{"true"}, Egress: &Egress{
			Allow: []string{"git.test:443", "10.0.0.0/8", "192.0.2.7:443"}, L7: L7Check,
			HTTP: []HTTPHost{{Host: "git.test", Default: HTTPDeny}},
		}}
		p.ApplyDefaults()
		return p
	}
	p := base()
	got := warnings(p)
	if len(got) != 2 || !strings.Contains(got[0], `"10.0.0.0/8"`) || !strings.Contains(got[0], "git.test") ||
		!strings.Contains(got[1], `"192.0.2.7:443"`) {
		t.Errorf("with http rules: %q", got)
	}
	p = base()
	p.Egress.HTTP = nil
	p.Secrets = []Secret{{Name: "K", From: "file:/etc/airlock/secrets/k", Inject: []SecretInject{{Host: "git.test", Header: "x-k"}}}}
	if got := warnings(p); len(got) != 2 || !strings.Contains(got[0], "git.test") {
		t.Errorf("with a secret: %q", got)
	}
	p.Secrets = nil
	if got := warnings(p); len(got) != 0 {
		t.Errorf("nothing checked: %q", got)
	}
	p = base()
	p.Egress.L7 = L7Off
	if got := warnings(p); len(got) != 0 {
		t.Errorf("without the gateway: %q", got)
	}
}

// TestValidateGatewayJSON checks the gateway's rules on a Policy that
// arrives as JSON, as the daemon receives it: nothing the decoder does
// (upper-casing methods, reading labels) is relied on for them.
func TestValidateGatewayJSON(t *testing.T) {
	base := `{"label":"t","image":"i","egress":{"allow":["api.test:443","*.corp.test:443"],"l7":"check","http":[%s]},"secrets":[%s]%s}`
	tests := []struct {
		name                    string
		http, secrets, approval string
		want                    []string // nil: valid
	}{
		{name: "valid", http: `{"host":"api.test","rules":[{"methods":["POST"],"path":"/v1/**","action":"ask"}]}`,
			secrets: `{"name":"K","from":"file:/etc/airlock/secrets/k","inject":[{"host":"api.test","header":"x-api-key"}]}`, approval: `,"approval":{"timeout":"5m"}`},
		{name: "method in lower case", http: `{"host":"api.test","rules":[{"methods":["post"],"action":"deny"}]}`,
			want: []string{`egress.http[0].rules[0].methods[0]: "post" is not in upper case`}},
		{name: "host in upper case", http: `{"host":"API.test","default":"deny"}`,
			want: []string{`egress.http[0].host: "API.test" is not written in canonical form (lower case, no trailing dot)`}},
		{name: "unknown action", http: `{"host":"api.test","rules":[{"action":"pass"}]}`,
			want: []string{`egress.http[0].rules[0].action: "pass" is not one of allow, deny, ask`}},
		{name: "wildcard inject", secrets: `{"name":"K","from":"file:/etc/airlock/secrets/k","inject":[{"host":"*.corp.test","bearer":true}]}`,
			want: []string{`secrets[0].inject[0].host: "*.corp.test" is a wildcard: the value would go to any name under corp.test, including ones that are not the service`}},
		{name: "inject into Host", secrets: `{"name":"K","from":"file:/etc/airlock/secrets/k","inject":[{"host":"api.test","header":"Host"}]}`,
			want: []string{`secrets[0].inject[0].header: Host frames, routes or is consumed on the way to the host (Host, Content-Length, Transfer-Encoding, Expect, Connection, Keep-Alive, Upgrade, TE, Trailer, HTTP2-Settings, Proxy-*), so the gateway sets it, never a secret`}},
		{name: "inject to a host the session cannot reach", secrets: `{"name":"K","from":"file:/etc/airlock/secrets/k","inject":[{"host":"evil.test","bearer":true}]}`,
			want: []string{`secrets[0].inject[0].host: the session cannot reach evil.test on a port the gateway checks [80 443] (no allow entry matches evil.test), and secrets are injected only through the gateway`}},
		{name: "no inject: guarded only", secrets: `{"name":"K","from":"file:/etc/airlock/secrets/k"}`},
		{name: "source outside the daemon's paths", secrets: `{"name":"K","from":"file:/etc/airlock/secrets/../../shadow","inject":[{"host":"api.test","bearer":true}]}`,
			want: []string{`secrets[0].from: "/etc/airlock/secrets/../../shadow" is not a clean path to a file (write "/etc/shadow")`}},
		{name: "approval too long", approval: `,"approval":{"timeout":"25h","on_timeout":"allow"}`,
			want: []string{`approval.timeout: timeout 25h0m0s is longer than the maximum 24h0m0s`, `approval.on_timeout: "allow" is not deny, the only choice`}},
		{name: "json conditions", http: `{"host":"api.test","default":"deny","rules":[{"methods":["POST"],"path":"/v1/jobs:cancel","json":[{"field":"ids","values":["job-dev-*"]}],"action":"allow"}]}`},
		{name: "json condition without values", http: `{"host":"api.test","rules":[{"json":[{"field":"ids"},{"field":"a b","values":["x"]}],"action":"allow"}]}`,
			want: []string{`egress.http[0].rules[0].json[0].values: json field "ids" has no values, so the rule could never match`,
				`egress.http[0].rules[0].json[1].field: "a b" is not a plain JSON key: a letter or '_', then at most 63 letters, digits, '_' or '-' (ASCII)`}},
		{name: "approval negative", http: `{"host":"api.test","default":"ask"}`, approval: `,"approval":{"timeout":-1}`,
			want: []string{`approval.timeout: timeout -1ns is negative`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Policy
			if err := json.Unmarshal(fmt.Appendf(nil, base, tt.http, tt.secrets, tt.approval), &p); err != nil {
				t.Fatal(err)
			}
			err := p.WithDefaults().Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate() = %v, want *ValidationError", err)
			}
			if !reflect.DeepEqual(verr.Problems, tt.want) {
				t.Errorf("problems:\n got %q\nwant %q", verr.Problems, tt.want)
			}
		})
	}
}

func TestCloneGateway(t *testing.T) {
	p := fullPolicy()
	c := p.Clone()
	if !reflect.DeepEqual(c, p) {
		t.Fatalf("Clone differs:\n got %+v\nwant %+v", c, p)
	}
	c.Egress.AllowPrivate[0] = "changed"
	c.Egress.HTTP[0].Host = "changed"
	c.Egress.HTTP[0].Rules[0].Methods[0] = "changed"
	c.Egress.HTTP[0].Rules[0].Refs[0] = "changed"
	c.Egress.HTTP[0].Rules[3].JSON[0].Values[0] = "changed"
	c.Egress.HTTP[0].Rules[3].JSON[1].Field = "changed"
	c.Secrets[0].Inject[0].Host = "changed"
	c.Approval.Timeout = 1
	if !reflect.DeepEqual(p, fullPolicy()) {
		t.Errorf("changing the clone changed the original: %+v", p)
	}
}
