// Resource icons (a resource's icon: in its config) are Material Design
// Icons, as in Concourse. The whole set is large, so it is a chunk of its
// own, loaded the first time a page shows a resource with an icon.
import { useEffect, useState } from 'preact/hooks';

// mdiName is the @mdi/js export of an icon's name: git -> mdiGit,
// numeric-1-box -> mdiNumeric1Box.
export function mdiName(icon) {
  return 'mdi' + String(icon).split('-').filter(Boolean).map((w) => w[0].toUpperCase() + w.slice(1)).join('');
}

let loaded = null;

// useIcons returns a function from an icon's name to its SVG path (''
// for an unknown name, or while the set loads); wanted says whether the
// page shows any icon at all.
export function useIcons(wanted) {
  const [icons, setIcons] = useState(null);
  useEffect(() => {
    if (!wanted) return undefined;
    let live = true;
    loaded = loaded || import('@mdi/js');
    loaded.then((m) => { if (live) setIcons(m); }, () => { loaded = null; });
    return () => { live = false; };
  }, [wanted]);
  return (name) => (icons && name && icons[mdiName(name)]) || '';
}
