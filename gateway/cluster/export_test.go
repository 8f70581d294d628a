package cluster

// ScanLog is scanLog for the external tests.
var ScanLog = scanLog
