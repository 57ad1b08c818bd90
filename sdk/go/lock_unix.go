//go:build unix

package devicesdk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
)

// lockQueue takes the exclusive lock on dir's meta file that both SDKs take
// (flock, not waiting), so that two processes never append to one queue.
func lockQueue(dir string) (*os.File, error) {
	f, err := os.Open(filepath.Join(dir, "meta"))
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, err
	}
	return f, nil
}
