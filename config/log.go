package config

import (
	"io"
	"log/slog"
)

// NewLogger returns the slog logger s asks for (LogLevel, LogFormat),
// writing to w. syncd logs to stderr: a terminal in the foreground, the
// journal under systemd, the log file the init script names under SysV.
func NewLogger(w io.Writer, s Settings) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
