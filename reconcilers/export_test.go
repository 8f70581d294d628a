package reconcilers

// RegistryRetryDelay lets tests shorten the delay between retried builds.
var RegistryRetryDelay = &registryRetryDelay
