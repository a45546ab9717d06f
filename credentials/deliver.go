package credentials

import (
	"context"
	"maps"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// WriteAtomic writes data to dir/name as a read-only file (mode 0400) owned
// by uid:gid (-1 leaves either unchanged), replacing any previous version by
// rename: a reader sees the old or the new credential, never a partial one.
// dir must exist; symlinks in it cannot redirect the write.
//
// The sandbox must see dir through a bind mount of the directory, not of the
// file: a rename replaces the directory entry, and a bind mount of the file
// would keep showing the old inode.
func WriteAtomic(dir, name string, data []byte, uid, gid int) error {
	return atomicfile.Write(dir, name, data, 0o400, uid, gid)
}

// FileWriter returns a Refresher write function that delivers each
// credential's token to dir/NAME with WriteAtomic.
func FileWriter(dir string, uid, gid int) func(context.Context, *Credential) error {
	return func(_ context.Context, c *Credential) error {
		return WriteAtomic(dir, c.Name, []byte(c.Token.Reveal()), uid, gid)
	}
}

// Environ returns c as environment entries, for delivery by environment
// variable (only when a manifest asks for it: variables are inherited by
// every child process and cannot be refreshed). The token is varName's
// value; c.Env entries follow, sorted by name.
func Environ(c *Credential, varName string) []string {
	env := make([]string, 0, 1+len(c.Env))
	if varName != "" {
		env = append(env, varName+"="+c.Token.Reveal())
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		env = append(env, k+"="+c.Env[k].Reveal())
	}
	return env
}
