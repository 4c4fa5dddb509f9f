export { DEMO_PAGE, startStandalone, type Standalone, type StandaloneOptions } from "./standalone.js";
export { DEMO_COUNTERS, DemoRoutes, type DemoAction } from "./demo_routes.js";
