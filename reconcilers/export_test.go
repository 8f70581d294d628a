package reconcilers

// RegistryRetryDelay lets tests shorten the delay between retried builds.
var RegistryRetryDelay = &registryRetryDelay

// RetireGrace lets tests shorten how long a revision without traffic keeps its objects.
var RetireGrace = &retireGrace
