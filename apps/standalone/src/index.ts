export { DEMO_PAGE, startStandalone, type Standalone, type StandaloneOptions } from "./standalone.js";
