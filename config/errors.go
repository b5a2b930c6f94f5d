package config

import "errors"

var (
	// ErrInvalid is returned by Load and Resolve for a setting whose value
	// is not acceptable, from any source; the message names the setting
	// and the source.
	ErrInvalid = errors.New("config: invalid setting")
	// ErrUnknownKey is returned for a key in the config file that is not a
	// setting; the message names the key and the file.
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrNoConfigFile is returned when the config file named by --config
	// or SYNCD_CONFIG does not exist. (The per-OS default file is only
	// read if it exists.)
	ErrNoConfigFile = errors.New("config: config file not found")
	// ErrNoDefaultDir is returned when a default location cannot be
	// derived (no home directory, no %ProgramData%): pass --data-dir.
	ErrNoDefaultDir = errors.New("config: no default directory")
)
