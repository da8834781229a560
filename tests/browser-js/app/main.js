// A minimal app built by Vite against the packed simplysync tarball. Tests drive it through
// window.simplysync (the package's public API, as an app imports it).
import * as simplysync from 'simplysync';

window.simplysync = simplysync;
document.getElementById('state').textContent = 'ready';
