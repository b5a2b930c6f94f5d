package main

import "golang.org/x/sys/windows"

// checkSocket: syncd serves no Unix socket on Windows.
func (d *doctor) checkSocket() {}

// diskSpace returns the free space (for this user) and the size of the
// volume holding dir.
func diskSpace(dir string) (free, total uint64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, err
	}
	err = windows.GetDiskFreeSpaceEx(p, &free, &total, nil)
	return free, total, err
}
