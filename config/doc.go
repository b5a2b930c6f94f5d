// Package config owns the settings of `syncd run`: their built-in
// defaults, the config file, the SYNCD_* environment variables and the
// command-line flags, resolved in that order of precedence (a later
// source wins), plus the per-OS default locations of the data directory
// and the config file.
//
// The config file is JSON with the keys of Settings' json names; an
// unknown key is an error that names it, and durations are Go duration
// strings ("30s", "24h"). Every setting has a flag (--data-dir) and an
// environment variable (SYNCD_DATA_DIR); list settings take a
// comma-separated value in the environment and may repeat as flags.
// Some defaults follow another setting's final value: socket is
// syncd.sock in the dataDir chosen (or "off" where the OS has no Unix
// socket listener), maxBodyBytes is maxDataBytes plus 64 KiB.
//
// The package does not run anything: cmd/syncd turns Settings into the
// queue, daemon and localapi Configs.
package config
