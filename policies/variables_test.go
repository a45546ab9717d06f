package policies

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVariables(t *testing.T) {
	const decl = `variable "task" {
  description = "what to do"
  default     = "nothing"
}
variable "cpus" {
  type    = number
  default = 1
}
variable "user" {}
variable "ipv6" { type = bool }
`
	const use = `session "t" {
  image   = "airlock/agent:bookworm"
  command = ["agent", "--task=${var.task}"]
  user    = var.user
  resources { cpus = var.cpus }
  egress { ipv6 = var.ipv6 }
}
`
	src := decl + use
	tests := []struct {
		name    string
		src     string
		vars    map[string]string
		summary string
		line    int
		check   func(t *testing.T, p *Policy)
	}{
		{
			name: "defaults and values",
			src:  src,
			vars: map[string]string{"user": "1000", "ipv6": "true"},
			check: func(t *testing.T, p *Policy) {
				if p.Command[1] != "--task=nothing" || p.User != "1000" || p.Resources.CPUs != 1 || !p.Egress.IPv6 {
					t.Errorf("got command %q, user %q, cpus %v, ipv6 %v", p.Command, p.User, p.Resources.CPUs, p.Egress.IPv6)
				}
			},
		},
		{
			name: "values override defaults",
			src:  src,
			vars: map[string]string{"user": "1000", "ipv6": "false", "task": "fix ${it}", "cpus": "2.5"},
			check: func(t *testing.T, p *Policy) {
				// A -var value is data: "${it}" in it is not a template.
				if p.Command[1] != "--task=fix ${it}" || p.Resources.CPUs != 2.5 || p.Egress.IPv6 {
					t.Errorf("got command %q, cpus %v, ipv6 %v", p.Command, p.Resources.CPUs, p.Egress.IPv6)
				}
			},
		},
		{
			name: "untyped variable takes its default's type",
			src:  "variable \"n\" { default = 4 }\n" + session("  resources { pids = var.n }"),
			vars: map[string]string{"n": "64"},
			check: func(t *testing.T, p *Policy) {
				if p.Resources.Pids != 64 {
					t.Errorf("pids = %d, want 64", p.Resources.Pids)
				}
			},
		},
		{
			name: "index syntax",
			src:  "variable \"u\" { default = \"7\" }\n" + session(`  user = var["u"]`),
			check: func(t *testing.T, p *Policy) {
				if p.User != "7" {
					t.Errorf("user = %q, want 7", p.User)
				}
			},
		},
		{name: "missing value", src: src, vars: map[string]string{"ipv6": "true"}, summary: "Missing value for variable", line: 9},
		{name: "undeclared -var", src: src, vars: map[string]string{"user": "1", "ipv6": "true", "tsak": "x"}, summary: "Undeclared variable", line: 1},
		{name: "value of wrong type", src: src, vars: map[string]string{"user": "1", "ipv6": "true", "cpus": "two"}, summary: "Invalid value for variable", line: 5},
		{name: "bool value", src: src, vars: map[string]string{"user": "1", "ipv6": "yes"}, summary: "Invalid value for variable", line: 10},
		{name: "huge -var number", src: src, vars: map[string]string{"user": "1", "ipv6": "true", "cpus": "1e-100000000"}, summary: "Invalid value for variable", line: 5},
		{name: "undeclared reference", src: session(`  user = var.nope`), summary: "Undeclared variable", line: 3},
		{name: "default refers to a variable", src: "variable \"a\" { default = \"x\" }\nvariable \"b\" { default = var.a }\n" + session(""), summary: "Variables not allowed", line: 2},
		{name: "default of wrong type", src: "variable \"a\" {\n  type    = number\n  default = \"x\"\n}\n" + session(""), summary: "Invalid default value", line: 3},
		{name: "bad type", src: "variable \"a\" {\n  type = list(string)\n  default = []\n}\n" + session(""), summary: "Invalid variable type", line: 2},
		{name: "duplicate variable", src: "variable \"a\" { default = 1 }\nvariable \"a\" { default = 2 }\n" + session(""), summary: "Duplicate variable", line: 2},
		{name: "unknown variable attribute", src: "variable \"a\" {\n  sensitive = true\n}\n" + session(""), summary: "Unsupported argument", line: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, derr := Decode("v.hcl", []byte(tt.src), tt.vars)
			checkDiagnostics(t, derr)
			if tt.summary == "" {
				if derr.HasErrors() {
					t.Fatalf("unexpected errors: %v", derr)
				}
				tt.check(t, p)
				return
			}
			if !derr.HasErrors() {
				t.Fatalf("want %q at line %d, got no error", tt.summary, tt.line)
			}
			// A variable without a value is reported once, where it is
			// declared, not again where it is used.
			errs := derr.Errors()
			if len(errs) != 1 || errs[0].Summary != tt.summary || errs[0].Line != tt.line {
				t.Errorf("errors = %v, want one %q at line %d", errs, tt.summary, tt.line)
			}
		})
	}
}

// TestNoFunctions checks that no function can be called from a manifest,
// wherever the call is, and that a file named in one is never read.
func TestNoFunctions(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("hunter2"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, expr := range []string{
		`file("` + secret + `")`,
		`env("HOME")`,
		`upper("x")`,
		`"${file("` + secret + `")}"`,
		`{a = file("x")}["a"]`,
		`true ? "a" : templatefile("x", {})`,
		`jsonencode({a = 1})`,
	} {
		t.Run(expr, func(t *testing.T) {
			for _, src := range []string{
				session("  user = " + expr),
				"variable \"v\" { default = " + expr + " }\n" + session(""),
			} {
				p, derr := Decode("f.hcl", []byte(src), nil)
				if p != nil {
					t.Fatalf("got a policy: %+v", p)
				}
				errs := derr.Errors()
				if len(errs) != 1 || errs[0].Summary != "Functions are not allowed" {
					t.Fatalf("errors = %v, want one %q", errs, "Functions are not allowed")
				}
				if strings.Contains(derr.Error(), "hunter2") {
					t.Fatalf("file content leaked: %v", derr)
				}
			}
		})
	}
}
