// A minimal app bundled by webpack 5 against the packed simplysync tarball; the tests drive it
// through window.simplysync.
import * as simplysync from 'simplysync';

window.simplysync = simplysync;
document.getElementById('state').textContent = 'ready';
