/** This package's version (package.json `version`, semver): printed by `webhook-inbox version` and checked by a test against package.json. */
export const PACKAGE_VERSION = "0.3.0";
