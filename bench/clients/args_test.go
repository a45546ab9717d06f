package clients

import (
	"reflect"
	"testing"
)

func TestParseFlags(t *testing.T) {
	specs := []flagSpec{
		{names: []string{"--repo", "-R"}, value: true},
		{names: []string{"--force"}},
	}
	tests := []struct {
		args     []string
		operands []string
		flags    map[string][]string
		err      string
	}{
		{args: []string{"482", "-R", "app", "--force"}, operands: []string{"482"}, flags: map[string][]string{"--repo": {"app"}, "--force": {"true"}}},
		{args: []string{"--repo=a=b", "x", "--repo", "c"}, operands: []string{"x"}, flags: map[string][]string{"--repo": {"a=b", "c"}}},
		{args: []string{"--repo", "--force"}, flags: map[string][]string{"--repo": {"--force"}}}, // a value may look like a flag
		{args: []string{"--", "--force", "-"}, operands: []string{"--force", "-"}, flags: map[string][]string{}},
		{args: []string{"-", "a"}, operands: []string{"-", "a"}, flags: map[string][]string{}},
		{args: []string{"--repo"}, err: "flag needs an argument: --repo"},
		{args: []string{"-R=app"}, err: "unknown flag: -R=app"},
		{args: []string{"--force=true"}, err: "flag --force takes no value"},
		{args: []string{"--json"}, err: "unknown flag: --json"},
	}
	for _, tt := range tests {
		p, err := parseFlags(tt.args, specs...)
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%q: error %v, want %q", tt.args, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(p.operands, tt.operands) || !reflect.DeepEqual(p.flags, tt.flags) {
			t.Errorf("%q: %q %v %v, want %q %v", tt.args, p.operands, p.flags, err, tt.operands, tt.flags)
		}
	}
}
