//go:build !linux

package runtime

import "errors"

// watchLogDir is not available: followers poll.
func watchLogDir(string) (<-chan struct{}, func(), error) {
	return nil, nil, errors.New("no inotify on this system")
}
