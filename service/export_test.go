package service

// CheckShellWords is checkShellWords, for tests.
var CheckShellWords = checkShellWords
